package broker

import (
	"bytes"
	"context"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// The embedded server is configured to fsync before every acknowledgement
// (sync_interval: always) unless LazySync asks for nats-server's default.
// That nats-server then syncs before it acknowledges is nats-server's own
// promise: a power cut cannot be staged here, and the cost of the sync is
// measured by BenchmarkSubmit in package stream.
func TestEmbeddedServerConfiguredToSyncBeforeAck(t *testing.T) {
	t.Parallel()
	ns, err := Start(Config{StoreDir: t.TempDir()})
	require.NoError(t, err)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	require.True(t, ns.JetStreamConfig().SyncAlways, "the default is sync_interval: always")

	lazy, err := Start(Config{StoreDir: t.TempDir(), LazySync: true})
	require.NoError(t, err)
	defer func() { lazy.Shutdown(); lazy.WaitForShutdown() }()
	require.False(t, lazy.JetStreamConfig().SyncAlways)

	tmp, err := Start(Config{})
	require.NoError(t, err)
	dir := tmp.JetStreamConfig().StoreDir
	tmp.Shutdown()
	tmp.WaitForShutdown()
	require.Eventually(t, func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) }, 5*time.Second, 10*time.Millisecond,
		"a store Start made up goes away with the server")
}

// An encrypted store keeps a message's bytes unreadable on disk, from the
// moment it is stored; a store opened with another key, or without one,
// refuses to start instead of letting a new stream be created over the old
// (nats-server skips a stream it cannot decrypt and answers "not found");
// the right key opens it with nothing lost.
func TestEncryptedStoreRefusesTheWrongKeyAndKeepsItsMessages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := "first-key-0123456789abcdef0123456789"
	publish(t, Config{StoreDir: dir, StoreKey: key}, "a-page-url-marker")
	require.Empty(t, filesHolding(t, dir, "a-page-url-marker"), "the store's files hold the message in the clear")

	for name, cfg := range map[string]Config{
		"another key": {StoreDir: dir, StoreKey: "other-key-0123456789abcdef0123456789"},
		"no key":      {StoreDir: dir},
	} {
		_, err := Start(cfg)
		require.Error(t, err, name)
		require.ErrorContains(t, err, "stream T", name)
		require.ErrorContains(t, err, "could not open", name)
		require.NotContains(t, err.Error(), "other-key", "%s: the key is never in a message", name)
	}
	require.Equal(t, uint64(1), messages(t, Config{StoreDir: dir, StoreKey: key}), "the right key opens the store with its message")
}

// A plaintext store opened with a key is encrypted in place by nats-server,
// and keeps its messages.
func TestPlaintextStoreIsEncryptedWhenAKeyIsGiven(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	publish(t, Config{StoreDir: dir}, "a-plain-marker")
	require.NotEmpty(t, filesHolding(t, dir, "a-plain-marker"), "the scan below would prove nothing")
	require.Equal(t, uint64(1), messages(t, Config{StoreDir: dir, StoreKey: "late-key-0123456789abcdef0123456789"}))
	require.Empty(t, filesHolding(t, dir, "a-plain-marker"))
}

// A key too short to be one is refused, by its length alone.
func TestShortStoreKeyIsRefused(t *testing.T) {
	t.Parallel()
	_, err := Start(Config{StoreDir: t.TempDir(), StoreKey: "hunter2"})
	require.ErrorContains(t, err, "the store key is 7 characters; at least 32")
	require.NotContains(t, err.Error(), "hunter2")
}

// publish starts a server on cfg, creates the file-backed stream T and
// stores one message, then stops the server.
func publish(t *testing.T, cfg Config, msg string) {
	t.Helper()
	withServer(t, cfg, func(ctx context.Context, _ *server.Server, js jetstream.JetStream) {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
		require.NoError(t, err)
		_, err = js.Publish(ctx, "t.a", []byte(msg))
		require.NoError(t, err)
	})
}

// messages starts a server on cfg and returns how many messages stream T
// holds.
func messages(t *testing.T, cfg Config) (n uint64) {
	t.Helper()
	withServer(t, cfg, func(ctx context.Context, _ *server.Server, js jetstream.JetStream) {
		s, err := js.Stream(ctx, "T")
		require.NoError(t, err)
		info, err := s.Info(ctx)
		require.NoError(t, err)
		n = info.State.Msgs
	})
	return n
}

// withServer starts a server on cfg, runs fn with an in-process JetStream
// client of it, and stops the server.
func withServer(t *testing.T, cfg Config, fn func(context.Context, *server.Server, jetstream.JetStream)) {
	t.Helper()
	ns, err := Start(cfg)
	require.NoError(t, err)
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fn(ctx, ns, js)
}

// filesHolding returns the files under dir that contain needle.
func filesHolding(t *testing.T, dir, needle string) []string {
	t.Helper()
	var found []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(needle)) {
			found = append(found, path)
		}
		return nil
	}))
	return found
}

// A temporary store (no StoreDir, no key) is encrypted with a key of its
// own: what it holds is not readable in its files while the server runs.
func TestTemporaryStoreIsEncrypted(t *testing.T) {
	t.Parallel()
	withServer(t, Config{}, func(ctx context.Context, ns *server.Server, js jetstream.JetStream) {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
		require.NoError(t, err)
		_, err = js.Publish(ctx, "t.a", []byte("a-temporary-marker"))
		require.NoError(t, err)
		dir := ns.JetStreamConfig().StoreDir
		require.Eventually(t, func() bool { return len(filesHolding(t, dir, "t.a")) > 0 || blocksWritten(t, dir) }, 10*time.Second, 10*time.Millisecond,
			"nothing reached the store's files")
		require.Empty(t, filesHolding(t, dir, "a-temporary-marker"))
		require.Empty(t, filesHolding(t, dir, "t.a"), "not even the subject is in the clear")
	})
}

// blocksWritten reports whether any message block under dir holds bytes.
func blocksWritten(t *testing.T, dir string) bool {
	t.Helper()
	written := false
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".blk" {
			return err
		}
		if info, err := d.Info(); err == nil && info.Size() > 0 {
			written = true
		}
		return nil
	}))
	return written
}

// A server from a config file whose client or leaf node port is held by
// something else says so at once, naming the address, as one without a
// config file does: across-sites' hub waited 30s ("nats-server not ready")
// with 4222 or 7422 taken.
func TestConfigFilePortTakenFailsAtOnce(t *testing.T) {
	t.Parallel()
	for _, what := range []string{"listen", "leafnodes"} {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			held, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			t.Cleanup(func() { _ = held.Close() })
			conf := "listen: 127.0.0.1:-1\n"
			if what == "listen" {
				conf = "listen: " + held.Addr().String() + "\n"
			} else {
				conf += "leafnodes { listen: " + held.Addr().String() + " }\n"
			}
			file := filepath.Join(t.TempDir(), "nats.conf")
			require.NoError(t, os.WriteFile(file, []byte(conf), 0o600))
			start := time.Now()
			ns, err := Start(Config{ConfigFile: file, StoreDir: t.TempDir()})
			if err == nil {
				ns.Shutdown()
			}
			require.ErrorContains(t, err, held.Addr().String())
			require.ErrorContains(t, err, "address already in use")
			require.Less(t, time.Since(start), 5*time.Second, "said at once")
		})
	}
}
