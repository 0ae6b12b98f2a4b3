package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// The Guard's room is bounded by JetStream's storage limit: with
// max_file_store at 1 MB, the room shrinks as a stream fills, and once the
// server refuses writes for its limit the Guard reports the store refusing.
func TestGuardRoomFollowsJetStreamLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("host: 127.0.0.1\nport: -1\njetstream { store_dir: %q, max_file_store: 1MB }\n", filepath.Join(dir, "js"))), 0o600))
	withServer(t, Config{ConfigFile: conf}, func(ctx context.Context, ns *server.Server, js jetstream.JetStream) {
		g := WatchStore(ns, GuardConfig{Every: 50 * time.Millisecond})
		defer g.Stop()
		st := g.Status()
		require.Equal(t, int64(1<<20), st.MaxStore)
		require.Equal(t, st.MaxStore, st.Room, "nothing stored yet: the whole limit is room")
		require.False(t, st.Refusing)

		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
		require.NoError(t, err)
		payload := make([]byte, 32<<10)
		for i := 0; ; i++ {
			_, err := js.Publish(ctx, "s", payload)
			if err != nil {
				var apiErr *jetstream.APIError
				require.True(t, errors.As(err, &apiErr), "%v", err)
				require.Contains(t, apiErr.Description, "insufficient resources")
				break
			}
			require.Less(t, i, 100)
			if i == 10 {
				// Status reuses a measurement for a moment: the shrink
				// shows at the next one.
				require.Eventually(t, func() bool { return g.Status().Room < st.Room-10*int64(len(payload)) },
					10*time.Second, 10*time.Millisecond, "the room shrinks with what is stored")
			}
		}
		require.Eventually(t, func() bool { st = g.Status(); return st.Refusing }, 10*time.Second, 10*time.Millisecond, "the store refuses writes")
		require.Contains(t, st.Error, "storage limit is exceeded")
		require.Zero(t, st.Room)
	})
}

// A disk filled by another file latches the stream that meets it (nats-
// server's critical write error); the Guard reports it, and once the file
// is gone reopens JetStream in place: the stream takes writes again, with
// what it held, and the hooks ran around the reopening.
func TestGuardReopensLatchedStoreWhenSpaceReturns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		skipOrFail(t, "not root")
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir).CombinedOutput(); err != nil {
		skipOrFail(t, fmt.Sprintf("mount -t tmpfs: %v: %s", err, out))
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	var reopening, reopened atomic.Int32
	withServer(t, Config{StoreDir: filepath.Join(dir, "js")}, func(ctx context.Context, ns *server.Server, js jetstream.JetStream) {
		g := WatchStore(ns, GuardConfig{Every: 50 * time.Millisecond,
			Reopening: func() { reopening.Add(1) }, Reopened: func() error { reopened.Add(1); return nil }})
		defer g.Stop()
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
		require.NoError(t, err)
		_, err = js.Publish(ctx, "s", []byte("before"))
		require.NoError(t, err)

		filler := filepath.Join(dir, "filler")
		f, err := os.Create(filler)
		require.NoError(t, err)
		for _, werr := f.Write(make([]byte, 1<<20)); werr == nil; _, werr = f.Write(make([]byte, 1<<20)) {
		}
		require.NoError(t, f.Close())
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err = js.Publish(pctx, "s", make([]byte, 64<<10))
		cancel()
		require.Error(t, err, "a full disk stores nothing")
		require.Eventually(t, func() bool { return g.Status().Refusing }, 5*time.Second, 20*time.Millisecond)
		require.Contains(t, g.Status().Error, "write error")
		require.Zero(t, reopening.Load(), "no reopening while the disk is full")

		require.NoError(t, os.Remove(filler))
		require.Eventually(t, func() bool { return reopened.Load() == 1 && !g.Status().Refusing }, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, int32(1), reopening.Load())
		_, err = js.Publish(ctx, "s", []byte("after"))
		require.NoError(t, err, "the stream takes writes again")
		s, err := js.Stream(ctx, "S")
		require.NoError(t, err)
		m, err := s.GetMsg(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, "before", string(m.Data), "what the stream held is still there")
	})
}

// skipOrFail skips a test that needs root to mount a small disk, except in
// CI, which runs as root.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("a small disk (tmpfs) is needed and could not be mounted: %s", why)
	}
	t.Skipf("a small disk (tmpfs) is needed and could not be mounted: %s", why)
}

// A disk that fills again while the Guard reopens the store (after it saw
// space and before JetStream is enabled again): the Guard does not give up
// on it. Once the space returns for good, the store takes writes again by
// itself, with what it held.
func TestGuardRecoversWhenTheDiskFillsDuringTheReopening(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		skipOrFail(t, "not root")
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir).CombinedOutput(); err != nil {
		skipOrFail(t, fmt.Sprintf("mount -t tmpfs: %v: %s", err, out))
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	filler := filepath.Join(dir, "filler")
	fill := func() {
		f, err := os.Create(filler)
		require.NoError(t, err)
		for _, werr := f.Write(make([]byte, 1<<20)); werr == nil; _, werr = f.Write(make([]byte, 1<<20)) {
		}
		require.NoError(t, f.Close())
	}
	var reopening atomic.Int32
	withServer(t, Config{StoreDir: filepath.Join(dir, "js")}, func(ctx context.Context, ns *server.Server, js jetstream.JetStream) {
		g := WatchStore(ns, GuardConfig{Every: 50 * time.Millisecond,
			Reopening: func() {
				if reopening.Add(1) == 1 {
					fill() // the disk fills again in the middle of the recovery
				}
			}})
		defer g.Stop()
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
		require.NoError(t, err)
		_, err = js.Publish(ctx, "s", []byte("before"))
		require.NoError(t, err)

		fill()
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err = js.Publish(pctx, "s", make([]byte, 64<<10))
		cancel()
		require.Error(t, err, "a full disk stores nothing")
		require.Eventually(t, func() bool { return g.Status().Refusing }, 5*time.Second, 20*time.Millisecond)

		require.NoError(t, os.Remove(filler)) // space: the Guard reopens, and the disk fills meanwhile
		require.Eventually(t, func() bool { return reopening.Load() >= 1 }, 10*time.Second, 20*time.Millisecond)
		time.Sleep(time.Second) // let the reopening on the full disk end, whatever it does
		require.NoError(t, os.Remove(filler))
		require.Eventually(t, func() bool {
			if g.Status().Refusing {
				return false
			}
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			_, err := js.Publish(pctx, "s", []byte("after"))
			return err == nil
		}, 20*time.Second, 100*time.Millisecond, "the store takes writes again by itself once the space returns: %+v", g.Status())
		s, err := js.Stream(ctx, "S")
		require.NoError(t, err)
		m, err := s.GetMsg(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, "before", string(m.Data), "what the stream held is still there")
	})
}

// A reopening whose last step fails (the memory streams cannot be created
// again, the disk full once more, say) is not the end: the Guard says it
// tries again, and does, until the store takes writes; it never asks for
// a restart.
func TestGuardTriesAFailedReopeningAgain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		skipOrFail(t, "not root")
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir).CombinedOutput(); err != nil {
		skipOrFail(t, fmt.Sprintf("mount -t tmpfs: %v: %s", err, out))
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	var reopened atomic.Int32
	withServer(t, Config{StoreDir: filepath.Join(dir, "js")}, func(ctx context.Context, ns *server.Server, js jetstream.JetStream) {
		g := WatchStore(ns, GuardConfig{Every: 50 * time.Millisecond, Reopened: func() error {
			if reopened.Add(1) == 1 {
				return errors.New("the disk filled again")
			}
			return nil
		}})
		defer g.Stop()
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
		require.NoError(t, err)
		filler := filepath.Join(dir, "filler")
		f, err := os.Create(filler)
		require.NoError(t, err)
		for _, werr := f.Write(make([]byte, 1<<20)); werr == nil; _, werr = f.Write(make([]byte, 1<<20)) {
		}
		require.NoError(t, f.Close())
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err = js.Publish(pctx, "s", make([]byte, 64<<10))
		cancel()
		require.Error(t, err, "a full disk stores nothing")
		require.Eventually(t, func() bool { return g.Status().Refusing }, 5*time.Second, 20*time.Millisecond)

		require.NoError(t, os.Remove(filler))
		require.Eventually(t, func() bool { return reopened.Load() == 1 }, 10*time.Second, 20*time.Millisecond)
		st := g.Status()
		require.NotContains(t, st.Action, "restart", "%+v", st)
		require.Eventually(t, func() bool { return reopened.Load() == 2 }, 2*raiseEvery, 50*time.Millisecond, "tried again")
		require.Eventually(t, func() bool { return !g.Status().Refusing }, 5*time.Second, 20*time.Millisecond)
		require.Empty(t, g.Status().Action)
		actx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // ctx is spent by the wait for the retry
		defer cancel()
		_, err = js.Publish(actx, "s", []byte("after"))
		require.NoError(t, err, "the stream takes writes again")
	})
}
