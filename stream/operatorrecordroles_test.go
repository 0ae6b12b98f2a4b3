package stream

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// Under the shipped nats.conf only the admin writes the operator's record
// of the plan quota (CAPTCHA_PLAN_OPERATOR): a producer's or a worker's
// credentials can neither create it, nor change or delete the admin's,
// and the record stays as the admin set it.
func TestOnlyTheAdminWritesTheOperatorsPlanRecord(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)
	for _, role := range []string{"producer", "worker"} {
		nc, errs := roleConn(t, ns, role)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		denied(t, errs, "$JS.API.STREAM.CREATE."+topology.OperatorPlanStream, func(ctx context.Context) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: topology.OperatorPlanStream, Subjects: []string{"captcha-plan.operator"}})
			return err
		})
	}
	admin, _ := roleConn(t, ns, "admin")
	ajs, err := jetstream.New(admin)
	require.NoError(t, err)
	require.NoError(t, SetPlan(ctx, admin, Topology{}, 3))
	for _, role := range []string{"producer", "worker"} {
		nc, errs := roleConn(t, ns, role)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		denied(t, errs, "$JS.API.STREAM.UPDATE."+topology.OperatorPlanStream, func(ctx context.Context) error {
			_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: topology.OperatorPlanStream, Subjects: []string{"captcha-plan.operator"},
				MaxMsgs: 1, Metadata: map[string]string{dispatcher.PlanMetaThreads: "0"}})
			return err
		})
		denied(t, errs, "$JS.API.STREAM.DELETE."+topology.OperatorPlanStream, func(ctx context.Context) error {
			return js.DeleteStream(ctx, topology.OperatorPlanStream)
		})
	}
	op, err := topology.ReadOperatorPlan(ctx, ajs)
	require.NoError(t, err)
	require.Equal(t, topology.OperatorPlan{Threads: 3}, op, "the admin's record stands")
}
