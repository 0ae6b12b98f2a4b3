package solver

// KnownCodes returns every code Classify knows by name, for tests.
func KnownCodes() []string { return knownCodes() }
