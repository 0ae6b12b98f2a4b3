package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// A worker that starts at a site right after its link to the hub comes
// back (started during the outage and waiting for the queue, or restarted
// then) receives the tasks the hub handed out again while the link was
// down. Their holders are alive and solving; their heartbeats expired at
// the hub during the outage and each stores its next within HeartbeatEvery
// of the return. The new worker must wait for that heartbeat, as a worker
// that saw the outage does, and not pay for the tasks a second time.
func TestSiteWorkerStartedAfterLinkReturnsPaysOnce(t *testing.T) {
	t.Parallel()
	top := Topology{Domain: "hub", AckWait: 2 * time.Second}
	s := startSites(t, top, "site.conf", true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	// Long enough to outlast the cut (heartbeats expire after HeartbeatTTL).
	sc, api := emulatorSolver(t, HeartbeatTTL+10*time.Second)
	var logs logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	start := func(name string, threads int) {
		t.Helper()
		wnc, _ := roleConn(t, s.site, "worker")
		var w *Worker
		// Right after the link is back the hub's JetStream may not answer
		// yet: retried as captchaq worker does (untilQueue).
		require.Eventually(t, func() bool {
			var err error
			w, err = NewWorker(ctx, wnc, WorkerConfig{Solver: sc, Threads: threads, Topology: top, Name: name, Logger: log,
				IdleCheck: 50 * time.Millisecond, ShutdownGrace: 100 * time.Millisecond,
				Policy: retry.Policy{InitialInterval: 50 * time.Millisecond, MaxInterval: 200 * time.Millisecond, NoJitter: true}})
			return err == nil
		}, 10*time.Second, 20*time.Millisecond)
		runWorker(t, w)
	}
	// Every thread of the holders busy: the redeliveries go to the new worker.
	start("holder-a", 3)
	start("holder-b", 3)
	pnc, _ := roleConn(t, s.site, "producer")
	producer, err := NewClient(ctx, pnc, ClientConfig{Topology: top, Name: "site-producer"})
	require.NoError(t, err)
	const n = 6
	for i := range n {
		_, err := producer.Submit(ctx, turnstileTask(fmt.Sprintf("late-%d", i)))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return api.Stats().Submitted == n }, 30*time.Second, 10*time.Millisecond, "every task at the service")

	s.cutUntilExpired(ctx, t, "holder-a", "holder-b")
	// The worker that starts now, with free threads.
	start("late-c", 6)

	for i := range n {
		out, err := producer.Wait(ctx, fmt.Sprintf("late-%d", i))
		require.NoError(t, err)
		require.NotEmpty(t, out.Solution)
	}
	require.Equal(t, n, api.Stats().Submitted, "a task was paid twice:\n%s", logs.String())
	for i := range n {
		tr, err := producer.Trace(ctx, fmt.Sprintf("late-%d", i))
		require.NoError(t, err)
		require.Equal(t, 1, traceKinds(tr)["attempt"], "one attempt for task %d: %v", i, traceKinds(tr))
	}
	require.NotContains(t, logs.String(), "died with its worker")
}

// A client at a site that gives the hub's domain while the site's link to
// the hub is down is told that no JetStream answers in that domain (a link
// down, or a domain no server has), not to give the domain it gave.
func TestSiteClientWithTheDomainWhileTheLinkIsDownIsToldSo(t *testing.T) {
	t.Parallel()
	top := Topology{Domain: "hub"}
	s := startSites(t, top, "site.conf", true)
	ctx := testContext(t)
	s.link.cut()
	require.Eventually(t, func() bool { return s.site.NumLeafNodes() == 0 }, 10*time.Second, 10*time.Millisecond)

	pnc, _ := roleConn(t, s.site, "producer")
	_, err := NewClient(ctx, pnc, ClientConfig{Topology: top})
	require.Error(t, err)
	require.ErrorContains(t, err, `JetStream domain "hub"`)
	require.NotContains(t, err.Error(), "reaches the hub's with --js-domain", "the client gave the domain")
	require.ErrorContains(t, err, "no JetStream answers in it")
	require.ErrorContains(t, err, "link")

	// Without a domain the hint stays: give the hub's.
	_, err = NewClient(ctx, pnc, ClientConfig{})
	require.ErrorContains(t, err, "--js-domain")
}

// The site's two link URLs swapped or copied (CAPTCHAQ_HUB_PRODUCERS_LEAF_URL
// with user "site"): the site's producers' account is then linked to the
// hub's streams' account, and a producer at the site is one of the
// streams' account again. A direct get of a message it published, answered
// on a token's subject, plants that token for another producer's task.
// Nothing says so: the hub takes both links, the site runs, and every
// client works. The hub should refuse, or at least say, that a site's
// producers reach the streams' account.
func TestSiteProducersLinkedAsTheSiteUserCannotPlantAToken(t *testing.T) {
	t.Parallel()
	top := Topology{Domain: "hub"}
	s := startSitesWith(t, top, "site.conf", true, func(opts *server.Options) {
		// Both remotes log in as "site", as with the URL copied.
		for _, r := range opts.LeafNode.Remotes {
			for _, u := range r.URLs {
				u.User = url.UserPassword("site", sitePassword)
			}
		}
	})
	ctx := testContext(t)

	vnc, _ := roleConn(t, s.site, "producer")
	victim, err := NewClient(ctx, vnc, ClientConfig{Topology: top, Name: "victim"})
	require.NoError(t, err)
	r, err := victim.Submit(ctx, turnstileTask("victim"))
	require.NoError(t, err)

	anc, _ := roleConn(t, s.site, "producer")
	plantToken(ctx, t, anc, "hub", "victim", r.Seq)

	var solves atomic.Int32
	solve := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		solves.Add(1)
		b, _ := json.Marshal("tok-" + req.Params["sitekey"])
		return solver.Answer{Solution: b, CaptchaID: fmt.Sprintf("7%d", solves.Load())}, nil
	})
	wnc, _ := roleConn(t, s.site, "worker")
	w, err := NewWorker(ctx, wnc, WorkerConfig{Solver: solve, Threads: 2, Topology: top, IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err)
	runWorker(t, w)

	out, err := victim.Wait(ctx, "victim")
	require.NoError(t, err)
	require.NotEqual(t, `"PLANTED"`, string(out.Solution), "the victim got the attacker's token")
}

// A producer at a site with JetStream of its own that forgets --js-domain
// gets no answer at all (its account has no JetStream, and nats-server
// does not answer for it); when its patience ends it is told, besides
// that no answer came, to give the hub's domain.
func TestSiteJSProducerWithoutDomainIsToldToGiveIt(t *testing.T) {
	t.Parallel()
	s := startSites(t, Topology{Domain: "hub"}, "site-js.conf", true)
	ctx, cancel := context.WithTimeout(testContext(t), 3*time.Second)
	defer cancel()
	pnc, _ := roleConn(t, s.site, "producer")
	_, err := NewClient(ctx, pnc, ClientConfig{})
	require.Error(t, err)
	require.ErrorContains(t, err, "no answer from JetStream")
	require.ErrorContains(t, err, "--js-domain")
}

// Two sites in two places, each running the shipped site.conf as the page
// says, linked to one hub: both stay linked, and tasks from either are
// solved once. (The hub takes a second link of the same server name and
// account for a reconnect of the first and drops the first: two sites of
// one name would drop each other's links forever.)
func TestTwoSitesFromTheShippedConfigStayLinked(t *testing.T) {
	t.Parallel()
	top := Topology{Domain: "hub"}
	s := startSites(t, top, "site.conf", true)
	ctx := testContext(t)

	// The second site: the same file, its own links to the hub.
	second := startServer(t, s.siteOptions(t, "site.conf"))
	require.Eventually(t, func() bool {
		return s.hub.NumLeafNodes() == 4 && s.site.NumLeafNodes() == 2 && second.NumLeafNodes() == 2
	}, 15*time.Second, 10*time.Millisecond, "both sites linked at once (hub: %d links)", s.hub.NumLeafNodes())

	sc, api := emulatorSolver(t, 0)
	for i, site := range []*server.Server{s.site, second} {
		wnc, _ := roleConn(t, site, "worker")
		w, err := NewWorker(ctx, wnc, WorkerConfig{Solver: sc, Threads: 2, Topology: top, Name: fmt.Sprintf("site%d-worker", i),
			IdleCheck: 50 * time.Millisecond, ShutdownGrace: 100 * time.Millisecond})
		require.NoError(t, err)
		runWorker(t, w)
	}
	for i, site := range []*server.Server{s.site, second} {
		pnc, _ := roleConn(t, site, "producer")
		producer, err := NewClient(ctx, pnc, ClientConfig{Topology: top, Name: fmt.Sprintf("site%d-producer", i)})
		require.NoError(t, err)
		out, err := producer.Solve(ctx, turnstileTask(fmt.Sprintf("two-sites-%d", i)))
		require.NoError(t, err)
		require.NotEmpty(t, out.Solution)
	}
	require.Equal(t, 2, api.Stats().Submitted, "every task paid once")
	require.Equal(t, 4, s.hub.NumLeafNodes(), "a site's link was dropped")
}
