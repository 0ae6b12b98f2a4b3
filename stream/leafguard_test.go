package stream

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/wire"
)

// records is a slog handler that hands every record at min or above to
// c, for a test to wait on.
type records struct {
	min slog.Level
	c   chan slog.Record
}

// newRecords is a records handler of level, whose channel holds 16.
func newRecords(level slog.Level) records { return records{min: level, c: make(chan slog.Record, 16)} }

func (h records) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }
func (h records) Handle(_ context.Context, r slog.Record) error {
	h.c <- r.Clone()
	return nil
}
func (h records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h records) WithGroup(string) slog.Handler      { return h }

// recordText is a record's message and attributes, as one line.
func recordText(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%s", a.Key, a.Value); return true })
	return b.String()
}

// hubLinks is the hub's connection ids of the leaf node links from the
// server named site into account.
func hubLinks(t *testing.T, hub *server.Server, site, account string) []uint64 {
	t.Helper()
	lz, err := hub.Leafz(&server.LeafzOptions{Account: account})
	require.NoError(t, err)
	var ids []uint64
	for _, l := range lz.Leafs {
		if l.Name == site && l.Account == account {
			ids = append(ids, l.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// hubGuard is what captchaq server guards at the shipped hub.conf.
func hubGuard(log *slog.Logger) broker.LeafGuard {
	return broker.LeafGuard{Account: "CAPTCHAQ", WorkerSubjects: []string{wire.SubjectStored + ".tasks."}, Logger: log}
}

// bothLinksAsSite edits a site's config so that both remotes log in as
// user "site", as with CAPTCHAQ_HUB_PRODUCERS_LEAF_URL copied from
// CAPTCHAQ_HUB_LEAF_URL.
func bothLinksAsSite(opts *server.Options) {
	for _, r := range opts.LeafNode.Remotes {
		for _, u := range r.URLs {
			u.User = url.UserPassword("site", sitePassword)
		}
	}
}

// A site whose producers' link logs in as "site" has both links in the
// hub's streams' account: the hub drops both, each time they come back,
// and says once which site and what to fix.
func TestHubDropsASitesProducersLinkedAsTheSiteUser(t *testing.T) {
	t.Parallel()
	s := startSitesWith(t, Topology{Domain: "hub"}, "site.conf", true, bothLinksAsSite)
	name := s.site.Name()
	first := hubLinks(t, s.hub, name, "CAPTCHAQ")
	require.Len(t, first, 2, "both of the site's links are in the streams' account")
	require.Equal(t, []broker.MislinkedSite{{Server: name, What: broker.BothInStreamsAccount, Links: first}}, hubGuard(nil).MislinkedSites(s.hub))

	errs := newRecords(slog.LevelError)
	stop := broker.GuardLeafLinks(s.hub, hubGuard(slog.New(errs)))
	t.Cleanup(stop)
	select {
	case r := <-errs.c:
		text := recordText(r)
		require.Contains(t, text, "site_server="+name)
		require.Contains(t, text, "CAPTCHAQ_HUB_PRODUCERS_LEAF_URL")
		require.Contains(t, text, "site-producers")
	case <-time.After(30 * time.Second):
		t.Fatal("no error about the site's links")
	}
	// Both links dropped; the site links again, and is dropped again.
	require.Eventually(t, func() bool {
		ids := hubLinks(t, s.hub, name, "CAPTCHAQ")
		return !slices.Contains(ids, first[0]) && !slices.Contains(ids, first[1])
	}, 30*time.Second, 10*time.Millisecond, "the first links are dropped")
	var again []uint64
	require.Eventually(t, func() bool {
		again = hubLinks(t, s.hub, name, "CAPTCHAQ")
		return len(again) == 2
	}, 30*time.Second, 10*time.Millisecond, "the site links again")
	require.Eventually(t, func() bool {
		ids := hubLinks(t, s.hub, name, "CAPTCHAQ")
		return !slices.Contains(ids, again[0]) && !slices.Contains(ids, again[1])
	}, 30*time.Second, 10*time.Millisecond, "the links that came back are dropped too")
	stop()
	require.Empty(t, errs.c, "the error is said once per site")
}

// Correctly linked sites keep their links while the hub drops a wrongly
// linked one: the guard has looked at every link by then.
func TestHubKeepsCorrectlyLinkedSites(t *testing.T) {
	t.Parallel()
	for _, conf := range []string{"site.conf", "site-js.conf"} {
		t.Run(conf, func(t *testing.T) {
			t.Parallel()
			s := startSites(t, Topology{Domain: "hub"}, conf, true)
			good := s.site.Name()
			before := hubLinks(t, s.hub, good, "CAPTCHAQ")
			require.Len(t, before, 1)
			producers := hubLinks(t, s.hub, good, "PRODUCERS")
			require.Len(t, producers, 1)
			// A worker at the site: its subscriptions cross the streams' link.
			wnc, _ := roleConn(t, s.site, "worker")
			w, err := NewWorker(testContext(t), wnc, WorkerConfig{Topology: Topology{Domain: "hub"}, Threads: 1, IdleCheck: 50 * time.Millisecond,
				Solver: solver.Func(func(context.Context, solver.Request) (solver.Answer, error) {
					return solver.Answer{}, fmt.Errorf("no task is submitted here")
				})})
			require.NoError(t, err)
			runWorker(t, w)
			require.Eventually(t, func() bool {
				lz, err := s.hub.Leafz(&server.LeafzOptions{Subscriptions: true, Account: "CAPTCHAQ"})
				require.NoError(t, err)
				for _, l := range lz.Leafs {
					for _, sub := range l.Subs {
						if l.Name == good && strings.HasPrefix(sub, wire.SubjectStored+".tasks.") {
							return true
						}
					}
				}
				return false
			}, 30*time.Second, 10*time.Millisecond, "the site's worker's subscriptions reach the hub")
			require.Empty(t, hubGuard(nil).MislinkedSites(s.hub))

			// A second site, on the same hub, with both links as "site".
			bopts, err := server.ProcessConfigFile(filepath.Join("..", "testdata", "leaf", "site.conf"))
			require.NoError(t, err)
			bopts.Port, bopts.NoSigs = -1, true
			bopts.LeafNode.ReconnectInterval = 100 * time.Millisecond
			for _, r := range bopts.LeafNode.Remotes {
				u, err := url.Parse(fmt.Sprintf("nats-leaf://site:%s@%s", sitePassword, s.link.addr))
				require.NoError(t, err)
				r.URLs = []*url.URL{u}
			}
			bad := startServer(t, bopts)
			require.Eventually(t, func() bool { return len(hubLinks(t, s.hub, bad.Name(), "CAPTCHAQ")) == 2 },
				30*time.Second, 10*time.Millisecond)

			errs := newRecords(slog.LevelError)
			stop := broker.GuardLeafLinks(s.hub, hubGuard(slog.New(errs)))
			t.Cleanup(stop)
			select {
			case r := <-errs.c:
				require.Contains(t, recordText(r), "site_server="+bad.Name())
			case <-time.After(30 * time.Second):
				t.Fatal("no error about the wrongly linked site")
			}
			stop()
			require.Equal(t, before, hubLinks(t, s.hub, good, "CAPTCHAQ"), "the correct site's streams link was kept")
			require.Equal(t, producers, hubLinks(t, s.hub, good, "PRODUCERS"), "the correct site's producers link was kept")
			require.Empty(t, errs.c)
		})
	}
}

// A site whose two URLs are swapped has its producers in the hub's
// streams' account and its workers in the producers' account, where they
// cannot work (they say the stream does not answer). Once a worker runs
// there, its subscriptions cross the producers' link: the hub drops both
// of the site's links and says which site and what to fix.
func TestHubDropsASitesSwappedLinks(t *testing.T) {
	t.Parallel()
	top := Topology{Domain: "hub"}
	s := startSitesWith(t, top, "site.conf", true, func(opts *server.Options) {
		for _, r := range opts.LeafNode.Remotes {
			for _, u := range r.URLs {
				if r.LocalAccount == "PRODUCERS" {
					u.User = url.UserPassword("site", sitePassword)
				} else {
					u.User = url.UserPassword("site-producers", siteProducersPassword)
				}
			}
		}
	})
	name := s.site.Name()
	streams, producers := hubLinks(t, s.hub, name, "CAPTCHAQ"), hubLinks(t, s.hub, name, "PRODUCERS")
	require.Len(t, streams, 1)
	require.Len(t, producers, 1)
	// Until a worker runs at the site, the hub cannot tell.
	require.Empty(t, hubGuard(nil).MislinkedSites(s.hub))

	ctx := testContext(t)
	wnc, _ := roleConn(t, s.site, "worker")
	w, err := NewWorker(ctx, wnc, WorkerConfig{Topology: top, Threads: 1, IdleCheck: 50 * time.Millisecond,
		Solver: solver.Func(func(context.Context, solver.Request) (solver.Answer, error) {
			return solver.Answer{}, fmt.Errorf("no task reaches a worker linked to the producers' account")
		})})
	require.NoError(t, err)
	runWorker(t, w)

	errs := newRecords(slog.LevelError)
	stop := broker.GuardLeafLinks(s.hub, hubGuard(slog.New(errs)))
	t.Cleanup(stop)
	select {
	case r := <-errs.c:
		text := recordText(r)
		require.Contains(t, text, "swapped")
		require.Contains(t, text, "site_server="+name)
		require.Contains(t, text, "CAPTCHAQ_HUB_LEAF_URL must log in as site and CAPTCHAQ_HUB_PRODUCERS_LEAF_URL as site-producers")
	case <-time.After(30 * time.Second):
		t.Fatal("no error about the site's swapped links")
	}
	require.Eventually(t, func() bool {
		return !slices.Contains(hubLinks(t, s.hub, name, "CAPTCHAQ"), streams[0]) &&
			!slices.Contains(hubLinks(t, s.hub, name, "PRODUCERS"), producers[0])
	}, 30*time.Second, 10*time.Millisecond, "both links are dropped")
}
