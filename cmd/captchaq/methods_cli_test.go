package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// Every CaptchaAI method through `captchaq submit --wait` against a worker
// process and the emulator: each ends solved with the service's answer
// shape; a task with soft_id and header_acao is accepted, and a parameter
// its method does not know (a near miss of a known one among them) is
// refused on its line, before anything is submitted.
func TestSubmitEveryMethodServiceShapes(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	fast := map[string]fakeapi.Range{}
	for _, k := range solver.Kinds() {
		fast[k] = fakeapi.Range{Min: 10 * time.Millisecond, Max: 30 * time.Millisecond}
	}
	_, emu := emulatorURL(t, fakeapi.Config{SolveTime: fast})
	w := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", emu, "--poll-scale", "0.01", "--threads", "8",
		"--name", "methods-worker")
	w.waitLine("worker started", 30*time.Second)

	png := base64.StdEncoding.EncodeToString(append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 200)...))
	lines := []string{
		`{"id":"gt3","method":"geetest","params":{"gt":"81dc9bdb52d04dc20036dbd8313ed055","challenge":"f0ea1e5c3ef4bd3f0d3b17d2b4e6f6a1","pageurl":"https://shop.example/register"}}`,
		`{"id":"gt4","method":"geetest","params":{"gt":"e392e1d7fd421dc63325744d5a2b9c73","version":4,"pageurl":"https://shop.example/login"}}`,
		`{"id":"cf","method":"cloudflare_challenge","params":{"pageurl":"https://shop.example/","proxy":"user:pass@203.0.113.7:3128","proxytype":"HTTP"}}`,
		`{"id":"hc","method":"hcaptcha","params":{"sitekey":"a5f74b19-9e45-40e0-b45d-47ff91b7a6c2","pageurl":"https://shop.example/login"}}`,
		`{"id":"bls","method":"bls","params":{"body":"` + png + `","textinstructions":"` + strings.Repeat("я", 140) + `"}}`,
		`{"id":"img","method":"base64","params":{"body":"` + png + `"}}`,
		`{"id":"soft","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/","soft_id":4583,"header_acao":1}}`,
	}
	unknown := filepath.Join(t.TempDir(), "unknown.jsonl")
	require.NoError(t, os.WriteFile(unknown, []byte(`{"id":"img2","method":"base64","params":{"body":"`+png+`","pageurl":"https://shop.example/"}}`+"\n"+
		`{"id":"soft2","method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/","pageUrl":"x"}}`+"\n"), 0o600))
	r := captchaq(t, natsURL, "submit", unknown)
	require.NotZero(t, r.code, r.stderr)
	require.Contains(t, r.stderr, `line 1 (id img2): params.pageurl: not a parameter of method base64`)
	require.Contains(t, r.stderr, `line 2 (id soft2): params.pageUrl: not a parameter of method turnstile (did you mean "pageurl"?)`)
	require.Contains(t, r.stderr, "nothing submitted")
	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	r = captchaq(t, natsURL, "submit", "--wait", "--timeout", "1m", file)
	require.Zero(t, r.code, "every task solved: %s\n%s", r.stderr, r.stdout)
	require.NotContains(t, r.stderr, "soft_id")

	out := map[string]stream.Outcome{}
	for _, o := range jsonLines[stream.Outcome](t, r.stdout) {
		if o.Status != "" {
			out[o.ID] = o
		}
	}
	require.Len(t, out, len(lines), r.stdout)
	for id, o := range out {
		require.Equal(t, stream.StatusSolved, o.Status, id)
	}
	a := func(id string) solver.Answer {
		return solver.Answer{Solution: out[id].Solution, UserAgent: out[id].UserAgent}
	}
	var v3 map[string]string
	require.NoError(t, json.Unmarshal(out["gt3"].Solution, &v3))
	require.Equal(t, "f0ea1e5c3ef4bd3f0d3b17d2b4e6f6a1", v3["geetest_challenge"], "GeeTest v3 keeps the service's field names")
	_, err := a("gt3").GeeTest()
	require.NoError(t, err)
	g4, err := a("gt4").GeeTestV4()
	require.NoError(t, err)
	require.Equal(t, "e392e1d7fd421dc63325744d5a2b9c73", g4.CaptchaID)
	cf, err := a("cf").Cloudflare()
	require.NoError(t, err, "cloudflare outcome carries the user agent: %+v", out["cf"])
	require.NotEmpty(t, cf.UserAgent)
	hc, err := a("hc").Text()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(hc, "P1_"), hc)
	cells, err := a("bls").Cells()
	require.NoError(t, err)
	require.NotEmpty(t, cells)
	_, err = a("img").Text()
	require.NoError(t, err)
	_, err = a("soft").Text()
	require.NoError(t, err)
}
