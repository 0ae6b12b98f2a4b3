package solver_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

func TestServiceOf(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]solver.Service{
		"https://ocr.captchaai.com": solver.CaptchaAI,
		"http://127.0.0.1:8088":     solver.CaptchaAI,
		"https://2captcha.com":      solver.TwoCaptcha,
		"https://api.2captcha.com/": solver.TwoCaptcha,
		"https://not2captcha.com":   solver.CaptchaAI,
		"https://2captcha.com.evil": solver.CaptchaAI,
	} {
		if got := solver.ServiceOf(url); got != want {
			t.Errorf("ServiceOf(%s) = %s, want %s", url, got, want)
		}
	}
	if _, err := solver.ParseService("anticaptcha"); err == nil || !strings.Contains(err.Error(), "captchaai or 2captcha") {
		t.Errorf("ParseService(anticaptcha) = %v", err)
	}
	if _, err := solver.NewClient(solver.Config{APIKey: fakeapi.TestKey, Service: "x"}); err == nil {
		t.Error("NewClient accepted service x")
	}
}

// TestServiceProfiles runs the same tasks against the emulator as CaptchaAI
// and as 2captcha: a method the profile lacks is refused naming it, and
// ERROR_ZERO_BALANCE means a full plan on one and no money on the other.
func TestServiceProfiles(t *testing.T) {
	t.Parallel()
	bls := solver.Request{Method: "bls", Params: map[string]string{"body": pngB64, "textinstructions": "select 317"}}
	v4 := solver.Request{Method: "geetest", Params: map[string]string{"gt": "e392e1d7fd421dc63325744d5a2b9c73", "version": "4", "pageurl": "https://shop.example/"}}
	cf := solver.Request{Method: "cloudflare_challenge", Params: map[string]string{"pageurl": "https://shop.example/", "proxy": "10.0.0.1:3128", "proxytype": "HTTP"}}

	t.Run("2captcha lacks methods", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts{api: fakeapi.Config{Service: fakeapi.Service2Captcha}, client: solver.Config{Service: solver.TwoCaptcha}})
		for _, req := range []solver.Request{bls, v4, cf} {
			_, err := b.client.Solve(ctxT(t), req)
			var ve *solver.ValidationError
			if solver.CodeOf(err) != solver.CodeInvalidParams || !errors.As(err, &ve) || !strings.Contains(err.Error(), "service profile 2captcha") {
				t.Errorf("%s on 2captcha: %v, want a refusal naming the profile", req.Method, err)
			}
		}
		if st := b.api.Stats(); st.InCalls != 0 {
			t.Errorf("%d in.php calls, want none: refused before sending", st.InCalls)
		}
	})
	t.Run("captchaai has them", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts{})
		for _, req := range []solver.Request{bls, v4, cf} {
			if _, err := b.client.Solve(ctxT(t), req); err != nil {
				t.Errorf("%s on CaptchaAI: %v", req.Method, err)
			}
		}
	})
	t.Run("the 2captcha emulator refuses them too", func(t *testing.T) {
		t.Parallel()
		// A client that believes it talks to CaptchaAI sends them; the
		// emulator as 2captcha does not know the method.
		b := setup(t, opts{api: fakeapi.Config{Service: fakeapi.Service2Captcha}})
		_, err := b.client.Solve(ctxT(t), bls)
		if solver.CodeOf(err) != "ERROR_BAD_PARAMETERS" {
			t.Errorf("bls at the 2captcha emulator: %v, want ERROR_BAD_PARAMETERS", err)
		}
	})
	t.Run("zero balance", func(t *testing.T) {
		t.Parallel()
		b := setup(t, opts{api: fakeapi.Config{Service: fakeapi.Service2Captcha, NoFunds: true}, client: solver.Config{Service: solver.TwoCaptcha}})
		_, err := b.client.Solve(ctxT(t), turnstile("https://shop.example/"))
		if solver.CodeOf(err) != "ERROR_ZERO_BALANCE" || solver.ClassOf(err) != retry.Fatal {
			t.Errorf("2captcha without money: %v, want ERROR_ZERO_BALANCE fatal", err)
		}
		full := setup(t, opts{api: fakeapi.Config{Threads: 1, SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: 1 << 40, Max: 1 << 40}}}})
		if _, err := full.client.Submit(ctxT(t), turnstile("https://shop.example/")); err != nil {
			t.Fatal(err)
		}
		_, err = full.client.Submit(ctxT(t), turnstile("https://shop.example/"))
		if solver.CodeOf(err) != "ERROR_ZERO_BALANCE" || solver.ClassOf(err) != retry.Capacity {
			t.Errorf("CaptchaAI with a full plan: %v, want ERROR_ZERO_BALANCE capacity", err)
		}
		full2 := setup(t, opts{api: fakeapi.Config{Service: fakeapi.Service2Captcha, Threads: 1,
			SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: 1 << 40, Max: 1 << 40}}}, client: solver.Config{Service: solver.TwoCaptcha}})
		if _, err := full2.client.Submit(ctxT(t), turnstile("https://shop.example/")); err != nil {
			t.Fatal(err)
		}
		_, err = full2.client.Submit(ctxT(t), turnstile("https://shop.example/"))
		if solver.CodeOf(err) != "ERROR_NO_SLOT_AVAILABLE" || solver.ClassOf(err) != retry.Capacity {
			t.Errorf("2captcha busy: %v, want ERROR_NO_SLOT_AVAILABLE capacity", err)
		}
		// What the worker tells the operator it stops on: the same code
		// means no money on 2captcha and busy threads on CaptchaAI.
		if why := solver.TwoCaptcha.Explain("ERROR_ZERO_BALANCE"); !strings.Contains(why, "no money") {
			t.Errorf("2captcha explains ERROR_ZERO_BALANCE as %q, want no money", why)
		}
		if why := solver.CaptchaAI.Explain("ERROR_ZERO_BALANCE"); !strings.Contains(why, "threads are busy") {
			t.Errorf("CaptchaAI explains ERROR_ZERO_BALANCE as %q, want busy threads", why)
		}
	})
}
