package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
)

const gatewayKey = "cli-key-0123456789abcdef00"

func gatewayKeyFile(t *testing.T) string {
	t.Helper()
	return writeKeyFile(t, `{"keys": [{"key": "`+gatewayKey+`", "producer": "cli"}]}`)
}

func writeKeyFile(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "keys.json")
	require.NoError(t, os.WriteFile(f, []byte(content), 0o600))
	return f
}

func gatewayGet(t *testing.T, base, op string, kv ...string) string {
	t.Helper()
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	resp, err := http.Get(base + "/" + op + "?" + v.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

var gatewayTurnstile = []string{"key", gatewayKey, "method", "turnstile", "sitekey", "0x4AAAAAAABkMYinukE8nzY", "pageurl", "https://shop.example/checkout"}

// `captchaq run --gateway ADDR` without a file: the one binary serves the
// gateway in front of its own server, workers and emulator until
// interrupted, reports included.
func TestRunServesTheGateway(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// A key with a share and no plan: the warning names run's own flag.
	keys := writeKeyFile(t, `{"keys": [{"key": "`+gatewayKey+`", "producer": "cli", "share": 0.5}]}`)
	p := startProc(t, nil, "run", "--gateway", addr, "--gateway-keys", keys, "--fake-speed", "100")
	p.waitLine("captchaq gateway on http://"+addr, 30*time.Second)
	require.Contains(t, p.output(), "or --gateway-plan-threads): keys' shares are not enforced")
	base := "http://" + addr
	out := gatewayGet(t, base, "in.php", gatewayTurnstile...)
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	id := strings.TrimPrefix(out, "OK|")
	deadline := time.Now().Add(30 * time.Second)
	for {
		out = gatewayGet(t, base, "res.php", "key", gatewayKey, "action", "get", "id", id)
		if out != "CAPCHA_NOT_READY" {
			break
		}
		require.True(t, time.Now().Before(deadline), "not solved in 30 s")
		time.Sleep(20 * time.Millisecond)
	}
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	// reportbad reaches the emulator through run's workers, which hold the key.
	require.Equal(t, "OK_REPORT_RECORDED", gatewayGet(t, base, "res.php", "key", gatewayKey, "action", "reportbad", "id", id))
	// A task still retrying when the run is interrupted is lost with its
	// temporary store: Ctrl-C says so and exits with its code.
	held := append(slices.Clone(gatewayTurnstile[:4]), "sitekey", "unsolvable", "pageurl", "https://shop.example/held")
	out = gatewayGet(t, base, "in.php", held...)
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 130, p.wait(30*time.Second), p.output())
	require.Contains(t, p.output(), "captchaq run: interrupted (Ctrl-C): the gateway stopped with 1 task(s) it accepted and no outcome yet; they are lost with this run's temporary store (--store DIR keeps them)")
}

// `captchaq gateway` against a separate server: a producer like any other,
// whose tasks carry the key's producer name.
func TestGatewayCommand(t *testing.T) {
	t.Parallel()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startProc(t, nil, "gateway", "--nats", natsURL, "--addr", addr, "--keys", gatewayKeyFile(t))
	p.waitLine("captchaq gateway on http://"+addr, 30*time.Second)
	out := gatewayGet(t, "http://"+addr, "in.php", gatewayTurnstile...)
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	id := strings.TrimPrefix(out, "OK|")
	require.Equal(t, "CAPCHA_NOT_READY", gatewayGet(t, "http://"+addr, "res.php", "key", gatewayKey, "action", "get", "id", id), "no workers")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tasks, err := client.Tasks(ctx, stream.TaskFilter{})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, "cli-"+id, tasks[0].ID)
	// trace shows it like any other task, submitted by the key's producer.
	tr := startProc(t, nil, "trace", "cli-"+id, "--nats", natsURL, "--json")
	require.Equal(t, 0, tr.wait(30*time.Second), tr.output())
	require.Contains(t, tr.output(), `"client":"cli"`)
	require.Equal(t, "ERROR_KEY_DOES_NOT_EXIST", gatewayGet(t, "http://"+addr, "in.php", "key", "nope", "method", "turnstile"))
}

// `captchaq server --gateway ADDR`: the gateway in the server's process,
// on an in-process connection.
func TestServerServesTheGateway(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n", freePort(t), filepath.Join(dir, "js"))), 0o600))
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startProc(t, nil, "server", "--config", conf, "--gateway", addr, "--gateway-keys", gatewayKeyFile(t))
	p.waitLine("captchaq gateway on http://"+addr, 30*time.Second)
	out := gatewayGet(t, "http://"+addr, "in.php", gatewayTurnstile...)
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	require.Equal(t, "CAPCHA_NOT_READY", gatewayGet(t, "http://"+addr, "res.php", "key", gatewayKey, "action", "get", "id", strings.TrimPrefix(out, "OK|")), "no workers")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, p.wait(30*time.Second))
}

// Wrong gateway flags are refused before anything starts, naming the flag.
func TestGatewayFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gateway"}, "--keys: required"},
		{[]string{"gateway", "--keys", "k.json", "--addr", "0.0.0.0:8090"}, "beyond loopback: set --https-cert"},
		{[]string{"gateway", "--keys", "k.json", "--https-cert", "c.pem"}, "--https-cert and --https-key go together"},
		{[]string{"run", "--gateway", "127.0.0.1:0"}, "--gateway-keys: required"},
		{[]string{"server", "--gateway", "192.0.2.1:8090", "--gateway-keys", "k.json"}, "beyond loopback: set --gateway-https-cert"},
	} {
		p := startProc(t, nil, tc.args...)
		require.Equal(t, 2, p.wait(30*time.Second), tc.args)
		require.Contains(t, p.output(), tc.want, tc.args)
	}
}
