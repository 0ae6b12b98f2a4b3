package sdktest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// jsonLine is one job's line from js/json.js.
type jsonLine struct {
	SDK      string          `json:"sdk"`
	Kind     string          `json:"kind"`
	TaskID   int64           `json:"taskId"`
	Solution json.RawMessage `json:"solution"`
	Error    string          `json:"error"`
}

// runJSON runs js/json.js against the gateway at base with k, for the jobs
// named (all solving jobs when none), and returns its lines by sdk:kind.
func runJSON(t *testing.T, base, k string, jobs ...string) map[string]jsonLine {
	t.Helper()
	node := nodeWith(t, "@zennolab_com/capmonstercloud-client", "@antiadmin/anticaptchaofficial")
	out := runNode(t, node, "json.js", []string{"CAPTCHAQ_GATEWAY=" + base, "CAPTCHAQ_KEY=" + k}, jobs...)
	lines := map[string]jsonLine{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var l jsonLine
		require.NoError(t, json.Unmarshal([]byte(line), &l), line)
		lines[l.SDK+":"+l.Kind] = l
	}
	return lines
}

// solutions are captchaq's outcomes of the key's tasks in the JSON
// dialect's solution shapes, each as compact JSON.
func solutions(t *testing.T, env *streamtest.Env) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := map[string]bool{}
	err := env.Client.OutcomesSince(ctx, time.Time{}, false, func(o stream.Outcome) {
		if o.Status != stream.StatusSolved {
			return
		}
		sol, err := createtask.Solution(o.Method, o.Solution, o.UserAgent)
		require.NoError(t, err)
		got[compact(t, sol)] = true
	})
	require.NoError(t, err)
	return got
}

func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(raw, &v), string(raw))
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// CapMonster Cloud's and Anti-Captcha's official JavaScript clients, each
// pointed at the gateway by the least intrusive means it allows (js/json.js
// says which), solve reCAPTCHA v2, Turnstile, GeeTest v3 and v4 and an
// image: each solution is one captchaq's stream holds, in the shape the
// client reads; Anti-Captcha's taskId is the number captchaq's task carries.
// Both read getBalance. Every task is paid once.
func TestJSONClients(t *testing.T) {
	env, base := start(t)
	lines := runJSON(t, base, key.Key)
	want := solutions(t, env)
	kinds := []string{"recaptcha", "turnstile", "geetest", "geetest_v4", "image"}
	for _, sdk := range []string{"capmonster", "anticaptcha"} {
		for _, kind := range kinds {
			l, ok := lines[sdk+":"+kind]
			require.True(t, ok, "%s:%s ran", sdk, kind)
			require.Empty(t, l.Error, "%s:%s failed", sdk, kind)
			var sol json.RawMessage = l.Solution
			var tok string
			if json.Unmarshal(l.Solution, &tok) == nil {
				// Anti-Captcha's solve* return the solution's one field.
				field := map[string]string{"recaptcha": "gRecaptchaResponse", "turnstile": "token", "image": "text"}[kind]
				require.NotEmpty(t, field, "%s:%s answered a string", sdk, kind)
				found := false
				for s := range want {
					var m map[string]string
					require.NoError(t, json.Unmarshal([]byte(s), &m))
					found = found || m[field] == tok
				}
				require.True(t, found, "%s:%s: %q is no outcome of captchaq's", sdk, kind, tok)
			} else {
				require.True(t, want[compact(t, sol)], "%s:%s: %s is no outcome of captchaq's", sdk, kind, sol)
			}
			if sdk == "anticaptcha" {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				out, err := env.Client.Wait(ctx, key.Producer+"-"+jsonNumber(l.TaskID))
				cancel()
				require.NoError(t, err, "anticaptcha:%s: taskId %d", kind, l.TaskID)
				require.Equal(t, stream.StatusSolved, out.Status)
			}
		}
	}
	require.Equal(t, 2*len(kinds), env.Emulator.Stats().Submitted, "each task paid once")
	bal := runJSON(t, base, key.Key, "capmonster:balance", "anticaptcha:balance")
	for k, l := range bal {
		require.Empty(t, l.Error, k)
		require.Contains(t, string(l.Solution), `"balance"`, k)
	}
}

func jsonNumber(n int64) string { b, _ := json.Marshal(n); return string(b) }

// A task that dies reaches each client as the service's code, which each
// reports as it reports the service's (CapMonster's ErrorType, Anti-Captcha's
// thrown errorCode); a wrong key is ERROR_KEY_DOES_NOT_EXIST to both, and
// nothing is submitted for it.
func TestJSONClientsErrors(t *testing.T) {
	env := streamtest.Start(t, streamtest.WithFaults(fakeapi.Faults{Unsolvable: 1}), streamtest.WithMaxAttempts(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, err := gateway.New(ctx, gateway.Config{Conn: env.Connect(nats.Name("gateway")), Topology: env.Topology,
		Keys: []gateway.Key{key}, Now: env.Now})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	base := serveGateway(t, gw)
	dead := runJSON(t, base, key.Key, "capmonster:turnstile", "anticaptcha:turnstile")
	require.Equal(t, "CAPTCHA_UNSOLVABLE", dead["capmonster:turnstile"].Error, "CapMonster's ErrorType for the code")
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", dead["anticaptcha:turnstile"].Error)
	require.Equal(t, 2, env.Emulator.Stats().Submitted)

	wrong := runJSON(t, base, "wrong-key-0123456789abcdef", "capmonster:turnstile", "capmonster:balance", "anticaptcha:turnstile", "anticaptcha:balance")
	for k, l := range wrong {
		want := "ERROR_KEY_DOES_NOT_EXIST"
		if strings.HasPrefix(k, "capmonster:") {
			want = "KEY_DOES_NOT_EXIST" // its ErrorType
		}
		require.Equal(t, want, l.Error, k)
	}
	require.Equal(t, 2, env.Emulator.Stats().Submitted, "nothing submitted for a wrong key")
}
