package provider_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
)

// TestBreakReusedIDClaimedFirstByTheSecond: a broken provider gives the
// id of the first worker's captcha to a second worker's submission, and
// the second worker's reply arrives (and its claim is made) before the
// first's reply does (the first's reply held up on the network, a front
// in front of the emulator holding it until the second worker has
// claimed). The second task then holds the claim and is handed the
// captcha of the first task's page, and its answer: a token for another
// page, reported solved. docs/providers.md admits the first worker gets
// the refusal "instead"; what the second task gets is the first's token.
// Neither task can tell whose captcha it is: both attempts should fail
// REUSED_CAPTCHA_ID (the first worker contests the claim, made after it
// sent its submission; the second refuses its answer).
func TestBreakReusedIDClaimedFirstByTheSecond(t *testing.T) {
	t.Parallel()
	b := startBed(t, 200*time.Millisecond, 5*time.Millisecond, bedNoWorker())
	env, plan := b.env, b.plan
	aAccepted, bClaimed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	target, err := url.Parse(plan.member.Entry.BaseURL)
	require.NoError(t, err)
	front := httputil.NewSingleHostReverseProxy(target)
	front.ModifyResponse = func(r *http.Response) error {
		if strings.HasSuffix(r.Request.URL.Path, "in.php") {
			once.Do(func() { // the first task's in.php: accepted, its reply held
				plan.api.SetFaults(fakeapi.Faults{ReuseID: true})
				close(aAccepted)
				<-bClaimed
			})
		}
		return nil
	}
	srv := httptest.NewServer(front)
	t.Cleanup(srv.Close)
	worker := func(base string) *provider.Set {
		cfg := plan.cfg
		cfg.BaseURL = base
		c, err := solver.NewClient(cfg)
		require.NoError(t, err)
		claims, err := stream.OpenClaims(t.Context(), env.Connect(), env.Topology)
		require.NoError(t, err)
		e := plan.member.Entry
		e.BaseURL = base
		set, err := provider.New(provider.Config{Members: []provider.Member{{Entry: e, Client: c}}, Claims: claims})
		require.NoError(t, err)
		return set
	}
	first, second := worker(srv.URL), worker(plan.member.Entry.BaseURL)
	type result struct {
		ans solver.Answer
		err error
	}
	done := make(chan result, 1)
	go func() {
		ans, err := first.Solve(t.Context(), solver.Request{Method: "userrecaptcha", Params: taskParams(1)})
		done <- result{ans, err}
	}()
	<-aAccepted
	ctx := solver.WithAccepted(t.Context(), func(solver.Accepted) {
		plan.api.SetFaults(fakeapi.Faults{})
		close(bClaimed)
	})
	ans, err := second.Solve(ctx, solver.Request{Method: "userrecaptcha", Params: taskParams(2)})
	a := <-done
	t.Logf("first task: captcha %s, err %v; second task: captcha %s, err %v; bill %d captchas",
		a.ans.CaptchaID, a.err, ans.CaptchaID, err, plan.api.Stats().Submitted)
	require.Equal(t, provider.CodeReusedID, solver.CodeOf(a.err), "the first task's reply came second: %v", a.err)
	require.Equal(t, 2, plan.api.Stats().Submitted, "both charged")
	require.Error(t, err, "the second task was handed the captcha (and token) of the first task's page: %s", ans.CaptchaID)
	require.Equal(t, provider.CodeReusedID, solver.CodeOf(err), "%v", err)
}
