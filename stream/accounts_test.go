package stream

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/broker"
)

// TestShippedConfigRefusesAStoreOfTheGlobalAccount: a store whose streams
// were written in the global account (no accounts in the configuration, as
// a server started without a configuration file, and nats.conf before producers got their own account) is not
// opened beside an empty new stream: the shipped configuration refuses to
// start and says what to do.
func TestShippedConfigRefusesAStoreOfTheGlobalAccount(t *testing.T) {
	t.Parallel()
	setRoleEnv(t)
	dir := t.TempDir()
	ns, err := broker.Start(broker.Config{Port: -1, StoreDir: dir})
	require.NoError(t, err)
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(t, err)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = EnsureTopology(testContext(t), js.Conn(), Topology{}, true)
	require.NoError(t, err)
	nc.Close()
	ns.Shutdown()
	ns.WaitForShutdown()

	ns, err = broker.Start(broker.Config{ConfigFile: shippedConfig, Port: -1, StoreDir: dir})
	if err == nil {
		ns.Shutdown()
	}
	require.ErrorContains(t, err, "holds stream CAPTCHA of account $G, which this configuration does not give JetStream")
	require.ErrorContains(t, err, "Start the previous configuration until the queue is empty")
}
