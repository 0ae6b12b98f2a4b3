package dispatcher

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// After a fetch that brought forged messages, the next asks for
// DrainBatch small ones, or as many large ones as DrainBytes holds (one at
// least); after one that brought none, one per free thread again.
func TestDrainAsksInBulkWhileForgedMessagesCome(t *testing.T) {
	t.Parallel()
	var dp Dispatcher
	f := &Feed{}
	dp.drainNext(f, 3, 4, 4*300)
	require.EqualValues(t, DrainBatch, f.drainWant.Load(), "small forged copies: a full batch")
	dp.drainNext(f, 2, 2, 2*(3<<20+512<<10))
	require.EqualValues(t, 2, f.drainWant.Load(), "3.5 MB copies: what DrainBytes holds")
	dp.drainNext(f, 1, 1, 16<<20)
	require.EqualValues(t, 1, f.drainWant.Load(), "one at least")
	dp.drainNext(f, 0, 4, 4*300)
	require.Zero(t, f.drainWant.Load(), "no forged copy: one per free thread")
}
