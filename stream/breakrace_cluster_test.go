package stream

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// Two operators, each on its own node of a three-node cluster (R3), set
// quotas 2 and 4 at the same moment (or 0 and 4): the argument that the writers
// converge leans on the broker answering a stream's info with its last
// update, which on a cluster is the stream leader's view, not the meta
// leader's. Once both returned nil, the record, the plan and its threads
// agree, and each call told its own quota or the one held.
// Before each write and purge of the plan stream was bounded
// (planCallWait), 2 of the 7 or 8 rounds of 0 and 4 per run hung both
// calls for their whole context (10 s here; init's is 30 s) in
// CreateOrUpdateStream, one updating and one creating, or in a purge:
// "plan stream: context deadline exceeded"; 2 and 4 held.
func TestBreakTwoOperatorsOnTwoNodesOfACluster(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	top := Topology{Replicas: 3}
	ctx := testContext(t)
	start := time.Now()
	var admins [2]*Admin
	var ncs [2]*nats.Conn
	for i := range admins {
		var err error
		ncs[i], err = nats.Connect(c.urls[i], nats.UserInfo("admin", rolePasswords["admin"]))
		require.NoError(t, err)
		t.Cleanup(ncs[i].Close)
		admins[i], err = NewAdmin(ncs[i], AdminConfig{Topology: top})
		require.NoError(t, err)
	}
	js, err := jetStreamOf(ncs[0], top)
	require.NoError(t, err)
	require.Eventually(t, func() bool { // until the cluster has elected its meta leader
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := EnsureTopology(actx, ncs[0], top, true)
		return err == nil
	}, 20*time.Second, 100*time.Millisecond)
	var apart []string
	const rounds = 15
	for i := range rounds {
		if err := admins[0].SetPlan(ctx, 3); err != nil {
			t.Fatalf("round %d (%v in): SetPlan(3) alone: %v\nrounds apart:\n%s", i, time.Since(start), err, strings.Join(apart, "\n"))
		}
		quotas := [2]int{2, 4}
		if i%2 == 1 {
			quotas[0] = 0 // one removes the quota as the other sets one
		}
		// init gives SetPlan 30 s; an answer takes milliseconds here.
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		errs := make(chan error, 2)
		var held [2]int
		began := time.Now()
		for j, adm := range admins {
			go func() { errs <- adm.SetPlan(rctx, quotas[j], PlanHeld(&held[j])) }()
		}
		var failed []string
		for range 2 {
			if err := <-errs; err != nil {
				failed = append(failed, err.Error())
			}
		}
		cancel()
		if len(failed) > 0 {
			apart = append(apart, fmt.Sprintf("round %d, quotas %v, after %v: %s", i, quotas, time.Since(began).Round(time.Millisecond), strings.Join(failed, "; ")))
			continue
		}
		rec, err := topology.ReadOperatorPlan(ctx, js)
		require.NoError(t, err)
		plan, err := dispatcher.ReadPlan(ctx, js)
		require.NoError(t, err)
		msgs := uint64(0)
		if s, err := js.Stream(ctx, dispatcher.PlanStream); err == nil {
			info, err := s.Info(ctx)
			require.NoError(t, err)
			msgs = info.State.Msgs
		}
		if rec.Threads != plan.Threads || msgs != uint64(plan.Threads) ||
			(held[0] != plan.Threads && held[1] != plan.Threads) {
			apart = append(apart, fmt.Sprintf("round %d: record %d, plan %d holding %d, calls told %v", i, rec.Threads, plan.Threads, msgs, held))
		}
	}
	if len(apart) > 0 {
		t.Fatalf("%d of %d rounds failed or left the record and the plan apart:\n%s", len(apart), rounds, strings.Join(apart, "\n"))
	}
}
