package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// smallDisk mounts a tmpfs of size on a new directory: a disk that fills.
// Mounting needs root: elsewhere the test is skipped, but not in CI, which
// runs as root.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root"
	} else if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		why = fmt.Sprintf("mount -t tmpfs: %v: %s", err, out)
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("a small disk (tmpfs) is needed and could not be mounted: %s", why)
		}
		t.Skipf("a small disk (tmpfs) is needed and could not be mounted: %s", why)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

// freeBytes is the free space of the filesystem holding dir.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var fs syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &fs))
	return int64(fs.Bavail) * int64(fs.Bsize)
}

// fillDisk writes a file into dir until leave bytes are free, or, with
// leave 0, until the disk is full (ENOSPC).
func fillDisk(t *testing.T, dir string, leave int64) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		n := int64(len(chunk))
		if leave > 0 {
			n = min(n, freeBytes(t, dir)-leave)
			if n <= 0 {
				return name
			}
		}
		if _, err := f.Write(chunk[:n]); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			return name
		}
	}
}

// diskServer starts `captchaq server` with its store on dir and returns it
// and its URL.
func diskServer(t *testing.T, dir string) (*proc, string) {
	t.Helper()
	port := freePort(t)
	conf := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n", port, filepath.Join(dir, "js"))), 0o600))
	server := startProc(t, []string{storeKeyEnv + "=" + testStoreKey}, "server", "--config", conf) // encrypted, as shipped
	server.waitLine("captchaq server ready", 30*time.Second)
	return server, fmt.Sprintf("nats://127.0.0.1:%d", port)
}

// imageTask is a task of about 40 KB: an image the emulator accepts, its
// own (the id in its bytes), so that the emulator counts what each task
// paid (fakeapi.TaskKey).
func imageTask(id string) stream.Task {
	img := append([]byte("\x89PNG\r\n\x1a\n"+id), make([]byte, 30<<10)...)
	return stream.Task{ID: id, Method: "base64", Params: stream.Params{"body": base64.StdEncoding.EncodeToString(img)}}
}

// paidOnce requires that the service accepted one captcha for each of the
// n tasks: none paid twice, none paid for nothing.
func paidOnce(t *testing.T, api *fakeapi.Server, n int) {
	t.Helper()
	st := api.Stats()
	for task, paid := range st.PerTask {
		require.Equal(t, 1, paid, "task %s paid %d times", task, paid)
	}
	require.Len(t, st.PerTask, n, "tasks paid")
	require.Equal(t, n, st.Submitted, "captchas accepted by the service (in.php)")
}

func diskClient(t *testing.T, url string) *stream.Client {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "disk-test"})
	require.NoError(t, err)
	return c
}

// storeOf runs `captchaq stats --json` and returns what it says of the store.
func storeOf(t *testing.T, url string) *stream.StoreStatus {
	t.Helper()
	cmd := exec.Command(os.Args[0], "stats", "--nats", url, "--json")
	cmd.Env = append(os.Environ(), childEnv...)
	out, err := cmd.Output()
	require.NoError(t, err, "stats: %s", out)
	var st stream.Stats
	require.NoError(t, json.Unmarshal(out, &st), string(out))
	return st.Store
}

// A disk that is nearly full before the server starts: JetStream's storage
// limit (75 % of the free space) is small. Producers are refused, saying the
// store is full, while there is still room to record every accepted task to
// its end; a worker started afterwards ends them all.
func TestFullDiskBeforeStartRefusesProducersAndEndsAcceptedTasks(t *testing.T) {
	t.Parallel()
	dir := smallDisk(t, "24m")
	fillDisk(t, dir, 8<<20)
	_, url := diskServer(t, dir)
	client := diskClient(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var receipts []stream.Receipt
	var refusal error
	for i := 0; refusal == nil; i++ {
		r, err := client.Submit(ctx, imageTask(fmt.Sprintf("before-%03d", i)))
		if err != nil {
			refusal = err
			break
		}
		receipts = append(receipts, r)
		require.Less(t, i, 1000, "a 24-MB disk took 1000 tasks of 40 KB")
	}
	require.ErrorIs(t, refusal, stream.ErrStreamFull, "a clear refusal: %v", refusal)
	require.Contains(t, refusal.Error(), "store")
	require.Greater(t, len(receipts), 10)
	st := storeOf(t, url)
	require.NotNil(t, st, "stats reports the store")
	require.False(t, st.Refusing, "the store still takes writes: %+v", st)

	api, emu := emulatorURL(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindImage: {Min: 10 * time.Millisecond, Max: 20 * time.Millisecond}}})
	w := startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", emu, "--poll-scale", "0.01", "--threads", "8")
	defer w.kill()
	n := 0
	require.NoError(t, client.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
		require.NoError(t, err, o.ID)
		require.Equal(t, stream.StatusSolved, o.Status, "%s: %+v", o.ID, o)
		n++
	}))
	require.Equal(t, len(receipts), n, "every accepted task ended")
	paidOnce(t, api, len(receipts))
}

// A disk filled by another file while the server runs: producers are
// refused, saying so; once a write fails, the server says at ERROR that its
// store refuses writes, the worker's /readyz and stats say so too; when the
// file goes, the server resumes by itself and every accepted task ends.
func TestFullDiskAfterStartIsReportedAndRecovers(t *testing.T) {
	t.Parallel()
	dir := smallDisk(t, "24m")
	server, url := diskServer(t, dir)
	client := diskClient(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	api, emu := emulatorURL(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindImage: {Min: 3 * time.Second, Max: 3 * time.Second}}})
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	w := startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", emu, "--threads", "2", "--metrics-addr", metrics)
	defer w.kill()
	w.waitLine("worker started", 30*time.Second)
	var receipts []stream.Receipt
	for i := range 6 {
		r, err := client.Submit(ctx, imageTask(fmt.Sprintf("after-%d", i)))
		require.NoError(t, err)
		receipts = append(receipts, r)
	}

	filler := fillDisk(t, dir, 0)
	require.Eventually(t, func() bool {
		_, err := client.Submit(ctx, imageTask("refused"))
		if err == nil {
			t.Fatalf("a task was accepted onto a full disk")
		}
		return errors.Is(err, stream.ErrStreamFull)
	}, 30*time.Second, 200*time.Millisecond, "a producer is refused, saying the store is full")

	// The workers' next write meets the full disk.
	server.waitLine("the JetStream store refuses writes", 60*time.Second)
	require.Contains(t, lineWith(server, "the JetStream store refuses writes"), "ERROR")
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + metrics + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	require.Eventually(t, func() bool {
		code, body := readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "refuses writes")
	}, 10*time.Second, 100*time.Millisecond, "the worker's /readyz reports the store")
	st := storeOf(t, url)
	require.NotNil(t, st)
	require.True(t, st.Refusing, "stats reports the store refusing writes: %+v", st)

	require.NoError(t, os.Remove(filler))
	server.waitLine("the JetStream store takes writes again", 30*time.Second)
	n := 0
	require.NoError(t, client.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
		require.NoError(t, err, o.ID)
		require.Equal(t, stream.StatusSolved, o.Status, "%s: %+v", o.ID, o)
		n++
	}))
	require.Equal(t, len(receipts), n, "every accepted task ended")
	paidOnce(t, api, len(receipts))
	require.Eventually(t, func() bool { code, _ := readyz(); return code == http.StatusOK }, 10*time.Second, 100*time.Millisecond)
	_, err := client.Submit(ctx, imageTask("after-recovery"))
	require.NoError(t, err, "producers are accepted again")
}

// lineWith is the first line of p's output containing s.
func lineWith(p *proc, s string) string {
	for _, l := range strings.Split(p.output(), "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// latchedStore is a 24-MB store filled with tasks up to the room producers
// keep, then latched by another file filling its disk under solves in
// flight: what the full-disk recovery tests start from.
type latchedStore struct {
	dir, url string
	server   *proc
	client   *stream.Client
	api      *fakeapi.Server
	receipts []stream.Receipt
	filler   string
}

func latchStore(ctx context.Context, t *testing.T) *latchedStore {
	t.Helper()
	ls := &latchedStore{dir: smallDisk(t, "24m")}
	ls.server, ls.url = diskServer(t, ls.dir)
	ls.client = diskClient(t, ls.url)
	for i := 0; ; i++ {
		r, err := ls.client.Submit(ctx, imageTask(fmt.Sprintf("full-%03d", i)))
		if err != nil {
			require.ErrorIs(t, err, stream.ErrStreamFull)
			break
		}
		ls.receipts = append(ls.receipts, r)
		require.Less(t, i, 1000, "a 24-MB disk took 1000 tasks of 40 KB")
	}
	t.Logf("%d tasks accepted; store %+v", len(ls.receipts), storeOf(t, ls.url))
	var emu string
	ls.api, emu = emulatorURL(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindImage: {Min: time.Second, Max: time.Second}}})
	w := startProc(t, keyEnv, "worker", "--nats", ls.url, "--solver-url", emu, "--threads", "24", "--poll-scale", "0.05")
	t.Cleanup(func() { _ = w.cmd.Process.Kill() })
	require.Eventually(t, func() bool { return ls.api.Stats().Submitted >= 4 }, 60*time.Second, 20*time.Millisecond)
	ls.filler = fillDisk(t, ls.dir, 0)
	ls.server.waitLine("the JetStream store refuses writes", 60*time.Second)
	return ls
}

// leave frees space by shrinking the filler until free bytes are free.
func (ls *latchedStore) leave(t *testing.T, free int64) {
	t.Helper()
	fi, err := os.Stat(ls.filler)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(ls.filler, max(fi.Size()-(free-freeBytes(t, ls.dir)), 0)))
}

// allSolvedOnce waits for every accepted task's outcome: each solved, and
// paid once at the service.
func (ls *latchedStore) allSolvedOnce(ctx context.Context, t *testing.T) {
	t.Helper()
	n, lost := 0, 0
	require.NoError(t, ls.client.WaitAll(ctx, ls.receipts, func(o stream.Outcome, err error) {
		if errors.Is(err, stream.ErrTokenExpired) {
			// Solved, its token not read yet, and lost with the memory
			// token stream: by a killed server, or stored while the
			// store was being reopened (between the reopening's reading
			// of the tokens and JetStream's shutdown). Counted and said,
			// not hidden: paid once, but its caller has no token.
			lost++
		} else {
			require.NoError(t, err, o.ID)
		}
		require.Equal(t, stream.StatusSolved, o.Status, "%s: %+v", o.ID, o)
		n++
	}), "store after: %+v", storeOf(t, ls.url))
	t.Logf("%d tasks solved (%d of them with their token lost); %d captchas accepted by the service", n, lost, ls.api.Stats().Submitted)
	require.Equal(t, len(ls.receipts), n, "every accepted task ended")
	paidOnce(t, ls.api, len(ls.receipts))
}

// A full disk freed while the server reopens its store, and the server
// SIGKILLed in the middle of the reopening: started again, its JetStream
// measures a storage limit (75 % of the free space and of what the streams
// hold) below what the streams hold, and refuses every write. The server
// recovers by itself all the same: every accepted task ends solved, each
// paid once, with no one restarting anything but the killed process.
func TestFullDiskServerKilledDuringReopenRecoversByItself(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ls := latchStore(ctx, t)

	// Some space again, less than a third of what the streams hold, more
	// than the margin the server keeps: the server reopens its store, and
	// dies doing so.
	ls.leave(t, 4608<<10)
	ls.server.waitLine("reopening the JetStream store", 30*time.Second)
	ls.server.kill()
	again := startProc(t, []string{storeKeyEnv + "=" + testStoreKey}, ls.server.cmd.Args[1:]...)
	again.waitLine("captchaq server ready", 60*time.Second)
	t.Logf("started again; store %+v", storeOf(t, ls.url))
	ls.allSolvedOnce(ctx, t)
}

// A disk that fills again while the server reopens its store: the server
// never asks for a restart; once space returns, writes resume by
// themselves and every accepted task ends, each paid once.
func TestFullDiskFilledAgainDuringReopenRecoversByItself(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ls := latchStore(ctx, t)

	require.NoError(t, os.Remove(ls.filler))
	ls.server.waitLine("reopening the JetStream store", 30*time.Second)
	ls.filler = fillDisk(t, ls.dir, 0) // while it reopens, or just after
	require.Eventually(t, func() bool {
		// stats fails while JetStream is down for the reopening.
		cmd := exec.Command(os.Args[0], "stats", "--nats", ls.url, "--json")
		cmd.Env = append(os.Environ(), childEnv...)
		out, err := cmd.Output()
		var st stream.Stats
		return err == nil && json.Unmarshal(out, &st) == nil && st.Store != nil && (st.Store.Refusing || st.Store.Room == 0)
	}, 30*time.Second, 100*time.Millisecond, "the server sees the disk full again")
	ls.leave(t, 4608<<10)
	ls.allSolvedOnce(ctx, t)
	require.NotContains(t, ls.server.output(), "restart captchaq server")
}
