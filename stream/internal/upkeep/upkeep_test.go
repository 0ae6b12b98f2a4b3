package upkeep

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// recorder is a service that notes its start and stop in a shared log.
type recorder struct {
	name string
	log  *[]string
	fail error
	r    runner
}

func (s *recorder) Start(ctx context.Context) error {
	if s.fail != nil {
		return s.fail
	}
	*s.log = append(*s.log, "start "+s.name)
	s.r.run(ctx, func(ctx context.Context) { <-ctx.Done() })
	return nil
}

func (s *recorder) Stop() {
	if s.r.stop() {
		*s.log = append(*s.log, "stop "+s.name)
	}
}

// A group stops its services in the reverse order of their start, leaves
// out one that failed to start, and stops each once.
func TestGroupStopsInReverseOrder(t *testing.T) {
	t.Parallel()
	var log []string
	var g Group
	refused := errors.New("refused")
	a, b := &recorder{name: "a", log: &log}, &recorder{name: "b", log: &log, fail: refused}
	c, d := &recorder{name: "c", log: &log}, &recorder{name: "d", log: &log}
	require.NoError(t, g.Start(t.Context(), a))
	require.ErrorIs(t, g.Start(t.Context(), b), refused)
	require.NoError(t, g.Start(t.Context(), c))
	require.NoError(t, g.Start(t.Context(), d))
	d.Stop() // stopped early, as Run stops the waiting room
	g.Stop()
	g.Stop()
	require.Equal(t, []string{"start a", "start c", "start d", "stop d", "stop c", "stop a"}, log)
}

// A service's goroutine ends with the context it was started under, and
// Stop after that returns at once.
func TestLoopEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	ended := make(chan struct{})
	l := Loop(func(ctx context.Context) { <-ctx.Done(); close(ended) })
	require.NoError(t, l.Start(ctx))
	cancel()
	<-ended
	l.Stop()
}
