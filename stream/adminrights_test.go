package stream

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// An Admin checks that its connection carries the admin's permissions
// before an operator relies on it: under the shipped nats.conf the
// producer's and the worker's connections are refused at once, naming the
// right they lack, and the refusal still reaches the connection's own error
// handler; the admin's is accepted, and so is any connection to a server
// without users (a local trial, where everyone may do everything).
func TestAdminCheckPermissionsFollowsTheRoles(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)

	for _, user := range []string{"producer", "worker"} {
		nc, errs := roleConn(t, ns, user)
		adm, err := NewAdmin(nc, AdminConfig{})
		require.NoError(t, err)
		start := time.Now()
		err = adm.CheckPermissions(ctx)
		require.ErrorIs(t, err, ErrNotAdmin, user)
		require.ErrorIs(t, err, nats.ErrPermissionViolation, user)
		var ne *NotAdminError
		require.True(t, errors.As(err, &ne), "%s: %T %v", user, err, err)
		require.Equal(t, "publish", ne.Op, user)
		require.Equal(t, "$JS.API.INFO", ne.Subject, user)
		require.Contains(t, err.Error(), `may not publish to "$JS.API.INFO"`, user)
		require.Contains(t, err.Error(), "the admin's", user)
		// The refusal comes with the server's answer, not after the
		// check's own 5 s bound.
		require.Less(t, time.Since(start), 4*time.Second, user)
		select {
		case e := <-errs:
			require.ErrorIs(t, e, nats.ErrPermissionViolation, "%s: the connection's own handler hears the refusal too", user)
		case <-ctx.Done():
			t.Fatalf("%s: the connection's error handler never heard the refusal", user)
		}
	}

	anc, _ := roleConn(t, ns, "admin")
	adm, err := NewAdmin(anc, AdminConfig{})
	require.NoError(t, err)
	require.NoError(t, adm.CheckPermissions(ctx), "the admin's connection")

	bare := (&bundle{ns: bareServer(t)}).connect(t)
	adm, err = NewAdmin(bare, AdminConfig{})
	require.NoError(t, err)
	require.NoError(t, adm.CheckPermissions(ctx), "a server without users")
}
