package dispatcher

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/wire"
)

// feedsOf is a worker's consumers in the order the worker makes them:
// every lane's high-priority consumer, then every lane's normal one.
func feedsOf() []*Feed {
	var feeds []*Feed
	for _, p := range []wire.Priority{wire.PriorityHigh, wire.PriorityNormal} {
		for _, l := range wire.Lanes {
			feeds = append(feeds, &Feed{Lane: l, Priority: p})
		}
	}
	return feeds
}

// firstWithNews is the consumer a fetch for one free thread takes a task
// from: the first in the order looked at that may have one.
func firstWithNews(order []*Feed) *Feed {
	for _, f := range order {
		if f.News.Load() != f.EmptyAt.Load() {
			return f
		}
	}
	return nil
}

// TestNormalTakenBehindAHighFlood: with high-priority tasks always waiting
// (a flood, forged or not) and a normal one waiting too, a worker with one
// free thread at a time takes high ones first but the normal one within
// NormalShare fetches, then high ones first again; with no normal task
// waiting, high ones are taken every time.
func TestNormalTakenBehindAHighFlood(t *testing.T) {
	t.Parallel()
	feeds := feedsOf()
	dp := New(feeds)
	flood := func() {
		for _, f := range feeds {
			if f.Priority == wire.PriorityHigh {
				f.News.Add(1) // another high-priority task stored
			}
		}
	}
	take := func() *Feed {
		flood()
		order, _ := dp.rotated()
		f := firstWithNews(order)
		require.NotNil(t, f)
		if f.Priority == wire.PriorityHigh {
			dp.settle(1, 0)
		} else {
			f.EmptyAt.Store(f.News.Load()) // its only task taken
			dp.settle(0, 1)
		}
		return f
	}

	// No normal task waiting: high ones every time.
	for range 3 * NormalShare {
		require.Equal(t, wire.PriorityHigh, take().Priority)
	}

	for round := range 3 {
		normal := feeds[len(wire.Lanes)+round%len(wire.Lanes)]
		normal.News.Add(1) // a normal task stored, behind the flood
		fetches := 0
		for {
			fetches++
			f := take()
			if f.Priority == wire.PriorityNormal {
				require.Same(t, normal, f)
				break
			}
			require.Less(t, fetches, NormalShare, "round %d: the normal task not taken within %d fetches of a high flood", round, NormalShare)
		}
		require.Equal(t, NormalShare, fetches, "round %d: high first until the normal task's share is due", round)
		require.Equal(t, wire.PriorityHigh, take().Priority, "round %d: high first again after the normal share", round)
	}
}
