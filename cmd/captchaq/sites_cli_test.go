package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

// `captchaq server` keeps a queue, so it refuses to be a site of another
// one: with JetStream disabled, or linked to a hub as a leaf node (its own
// CAPTCHA stream would capture captcha.> beside the hub's). It says what
// to run instead, before it starts anything.
func TestServerRefusesToBeASite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, conf := range map[string]string{
		"disabled":        "listen: 127.0.0.1:-1\njetstream: disabled\n",
		"disabled (bool)": "listen: 127.0.0.1:-1\njetstream: false\n",
		"leaf":            "listen: 127.0.0.1:-1\nleafnodes { remotes = [ { urls: [\"nats-leaf://127.0.0.1:1\"] } ] }\n",
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".conf")
			require.NoError(t, os.WriteFile(file, []byte(conf), 0o600))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := runServer(ctx, []string{"--config", file, "--store", filepath.Join(dir, "store-"+strings.ReplaceAll(name, " ", "_"))}, io.Discard, io.Discard)
			require.Error(t, err)
			require.ErrorContains(t, err, "testdata/leaf/site.conf")
			require.ErrorContains(t, err, "--js-domain")
			if name == "leaf" {
				require.ErrorContains(t, err, "second CAPTCHA stream")
			} else {
				require.ErrorContains(t, err, "jetstream is disabled")
			}
		})
	}
}

// Every command that talks to JetStream takes --js-domain: `init` creates
// the topology in the domain it names; `stats` (a reader) finds it there,
// and refuses, naming the domain, where there is none, creating nothing.
func TestJSDomainFlag(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "hub.conf")
	require.NoError(t, os.WriteFile(conf, []byte("listen: 127.0.0.1:-1\njetstream { domain: hub }\n"), 0o600))
	ns, err := broker.Start(broker.Config{ConfigFile: conf, Port: -1, StoreDir: t.TempDir(), LazySync: true})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	url := ns.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()

	// Before init: a reader refuses and names the domain it reached.
	err = runStats(ctx, []string{"--nats", url}, io.Discard, io.Discard)
	require.ErrorIs(t, err, stream.ErrNoTopology)
	require.ErrorContains(t, err, `JetStream domain "hub"`)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.Stream(ctx, stream.DefaultStream)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "stats created the stream")

	require.NoError(t, runInit(ctx, []string{"--nats", url, "--js-domain", "hub"}, io.Discard, io.Discard))
	_, err = js.Stream(ctx, stream.DefaultStream)
	require.NoError(t, err)
	require.NoError(t, runStats(ctx, []string{"--nats", url, "--js-domain", "hub"}, io.Discard, io.Discard))

	err = runStats(ctx, []string{"--nats", url, "--js-domain", "nowhere"}, io.Discard, io.Discard)
	require.Error(t, err)
	require.ErrorContains(t, err, `JetStream domain "nowhere"`)
}
