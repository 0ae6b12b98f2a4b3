package stream

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
)

// A NewSolver or WrapSolver that hands back no solver (and no error) is a
// configuration mistake: NewWorker refuses it, naming the field, instead of
// a worker that crashes at its first task.
func TestNewWorkerRefusesNoSolverFromTheConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	client := func(bool) (*solver.Client, error) {
		return solver.NewClient(solver.Config{BaseURL: "http://127.0.0.1:1", APIKey: "0123456789abcdef0123456789abcdef"})
	}

	_, err := NewWorker(ctx, b.nc, WorkerConfig{Topology: b.top,
		NewSolver: func(bool) (*solver.Client, error) { return nil, nil }})
	require.ErrorContains(t, err, "NewSolver")

	_, err = NewWorker(ctx, b.nc, WorkerConfig{Topology: b.top, NewSolver: client,
		WrapSolver: func(solver.Solver) solver.Solver { return nil }})
	require.ErrorContains(t, err, "WrapSolver")
}
