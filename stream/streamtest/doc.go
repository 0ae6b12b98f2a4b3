// Package streamtest runs a whole captchaq inside a Go test: an embedded
// JetStream server with the CAPTCHA topology, an emulator of the solving
// service, workers that solve through it, and a producer client — all
// in-process (no ports) by default, and torn down by t.Cleanup.
//
//	env := streamtest.Start(t)
//	out, err := env.Client.Solve(t.Context(), task)
//	require.NoError(t, err)
//
// Options shape the emulator (WithSolveTime, WithFaults, WithPlanThreads) and
// the workers (WithMaxAttempts, WithWorkers, WithThreads, WithTokenLifetime),
// so a test can drive its own code through dead letters, retries and expired
// tokens in milliseconds. Env.Emulator.SetFaults changes faults mid-test;
// Env.Advance moves the shared clock to expire tokens and deadlines.
package streamtest
