//go:build !race

package stream

// underRace is set when the tests run with the race detector, which slows
// the embedded broker's encryption and the workers several times over.
const underRace = false
