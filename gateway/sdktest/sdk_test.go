package sdktest

import (
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	api2captcha "github.com/2captcha/2captcha-go"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

var key = gateway.Key{Key: "sdk-key-0123456789abcdef0", Producer: "sdk"}

// start runs captchaq (embedded JetStream, the emulator, workers) and the
// gateway on 127.0.0.1, and returns the gateway's base URL.
func start(t *testing.T) (*streamtest.Env, string) {
	t.Helper()
	env := streamtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, err := gateway.New(ctx, gateway.Config{Conn: env.Connect(nats.Name("gateway")), Topology: env.Topology,
		Keys: []gateway.Key{key}, Now: env.Now})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	return env, serveGateway(t, gw)
}

// serveGateway serves gw on 127.0.0.1 until the test ends and returns its
// base URL.
func serveGateway(t *testing.T, gw *gateway.Gateway) string {
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return srv.URL
}

// outcomeText is the answer captchaq's stream holds for the SDK's id, as
// the plain-text dialect gives it.
func outcomeText(t *testing.T, env *streamtest.Env, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := env.Client.Wait(ctx, key.Producer+"-"+id)
	require.NoError(t, err)
	return out.Text()
}

// The official Go SDK, its BaseURL pointed at the gateway, solves
// reCAPTCHA v2, Turnstile, an image (multipart upload) and GeeTest, each
// answer the one captchaq's stream holds.
func TestGoSDK(t *testing.T) {
	env, base := start(t)
	u, err := url.Parse(base)
	require.NoError(t, err)

	img := filepath.Join(t.TempDir(), "captcha.png")
	f, err := os.Create(img)
	require.NoError(t, err)
	m := image.NewGray(image.Rect(0, 0, 40, 16))
	m.Set(3, 3, color.White)
	require.NoError(t, png.Encode(f, m))
	require.NoError(t, f.Close())

	reqs := map[string]api2captcha.Request{
		"recaptcha": (&api2captcha.ReCaptcha{SiteKey: "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", Url: "https://shop.example/login"}).ToRequest(),
		"turnstile": (&api2captcha.CloudflareTurnstile{SiteKey: "0x4AAAAAAABkMYinukE8nzY", Url: "https://shop.example/checkout"}).ToRequest(),
		"image":     (&api2captcha.Normal{File: img, Numberic: 1}).ToRequest(),
		"geetest": (&api2captcha.GeeTest{GT: "022397c99c9f646f6477822485f30404", Challenge: "a66f31a53a6e1d0f7aa0d4b41bd57ac1",
			Url: "https://shop.example/login"}).ToRequest(),
		"geetest_v4": (&api2captcha.GeeTestV4{CaptchaId: "e392e1d7fd421dc63325744d5a2b9c73", Url: "https://shop.example/login"}).ToRequest(),
	}
	var wg sync.WaitGroup
	for kind, req := range reqs {
		wg.Go(func() {
			c := api2captcha.NewClient(key.Key)
			c.BaseURL = u // the one change
			c.PollingInterval = 1
			token, id, err := c.Solve(req)
			if !assertNoError(t, kind, err) {
				return
			}
			if kind == "geetest" || kind == "geetest_v4" {
				var obj map[string]string
				if err := json.Unmarshal([]byte(token), &obj); err != nil || len(obj) == 0 {
					t.Errorf("%s: answer %q is not the GeeTest object", kind, token)
				}
			}
			if want := outcomeText(t, env, id); token != want {
				t.Errorf("%s: SDK got %q, captchaq's outcome is %q", kind, token, want)
			}
		})
	}
	wg.Wait()

	// A wrong key: the SDK (v1.1.10) turns every ERROR_ code into ErrApi
	// (api2captcha.go, Send), and so it does here; nothing is queued.
	c := api2captcha.NewClient("wrong-key-0123456789abcdef")
	c.BaseURL = u
	_, _, err = c.Solve((&api2captcha.CloudflareTurnstile{SiteKey: "0x4AAAAAAABkMYinukE8nzY", Url: "https://shop.example/"}).ToRequest())
	require.ErrorIs(t, err, api2captcha.ErrApi)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tasks, err := env.Client.Tasks(ctx, stream.TaskFilter{})
	require.NoError(t, err)
	require.Empty(t, tasks)
	// getbalance parses as the SDK's float.
	good := api2captcha.NewClient(key.Key)
	good.BaseURL = u
	bal, err := good.GetBalance()
	require.NoError(t, err)
	require.Positive(t, bal)
}

// nodeWith returns node's path, having checked that js/node_modules holds
// the packages; without them the test skips, or fails in CI.
func nodeWith(t *testing.T, pkgs ...string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	for _, pkg := range pkgs {
		if err == nil {
			_, err = os.Stat(filepath.Join("js", "node_modules", pkg, "package.json"))
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node and js/node_modules are required in CI (.ci/run runs npm ci in gateway/sdktest/js): %v", err)
		}
		t.Skipf("no node or no js/node_modules (run npm ci in gateway/sdktest/js): %v", err)
	}
	return node
}

// runNode runs js/script with args and the environment's variables env,
// within 90 s, and returns its output.
func runNode(t *testing.T, node, script string, env []string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Dir = "js"
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	return out
}

func assertNoError(t *testing.T, kind string, err error) bool {
	if err != nil {
		t.Errorf("%s: %v", kind, err)
		return false
	}
	return true
}

// The official JavaScript SDK, its provider endpoints pointed at the
// gateway, solves reCAPTCHA v2, Turnstile, an image (a JSON body), GeeTest
// v3 and v4, each answer the one captchaq's stream holds.
func TestJavaScriptSDK(t *testing.T) {
	node := nodeWith(t, "@2captcha/captcha-solver")
	env, base := start(t)
	out := runNode(t, node, "solve.js", []string{"CAPTCHAQ_GATEWAY=" + base, "CAPTCHAQ_KEY=" + key.Key, "POLL_MS=50"})
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Kind      string          `json:"kind"`
			ID        string          `json:"id"`
			Data      json.RawMessage `json:"data"`
			UserAgent string          `json:"useragent"`
			Error     string          `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		require.Empty(t, r.Error, "%s: the SDK failed", r.Kind)
		seen[r.Kind] = true
		var text string
		if json.Unmarshal(r.Data, &text) != nil {
			text = string(r.Data) // GeeTest's object, as res.php's JSON has it
			var obj map[string]string
			require.NoError(t, json.Unmarshal(r.Data, &obj), "%s: %s", r.Kind, r.Data)
			want := map[string]string{}
			require.NoError(t, json.Unmarshal([]byte(outcomeText(t, env, r.ID)), &want))
			require.Equal(t, want, obj, r.Kind)
			continue
		}
		require.Equal(t, outcomeText(t, env, r.ID), text, r.Kind)
		if r.Kind == "turnstile" {
			require.NotEmpty(t, r.UserAgent, "Turnstile's answer carries the user agent")
		}
	}
	require.Equal(t, map[string]bool{"recaptcha": true, "turnstile": true, "image": true, "geetest": true, "geetest_v4": true}, seen)
}
