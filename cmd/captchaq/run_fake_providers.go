package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
)

// fakePlanThreads is the emulated plan's size in `run --fake-providers`:
// small, so that a run's tasks find it full and the overflow is seen at
// work.
const fakePlanThreads = 3

// fakeSparePrices are the emulated per-solve provider's prices per 1000
// (2captcha's list: reCAPTCHA $2.99, a normal captcha from $1.00,
// 2captcha.com/order-captchas, as testdata/providers.json states them).
var fakeSparePrices = map[string]float64{captcha.MethodReCaptcha: 2.99, captcha.MethodBase64: 1.0, captcha.MethodPost: 1.0}

// fakeProviders starts the two emulated providers of `run
// --fake-providers`, a CaptchaAI thread plan (primary) and a per-solve
// 2captcha (overflow), each on a free port of 127.0.0.1 at speed times
// real speed, and the Set over them; bills prints each emulator's bill,
// stop stops both.
func (s *solverFlags) fakeProviders(speed float64, policy provider.OverflowPolicy) (set *provider.Set, bills func(io.Writer), stop func(), err error) {
	dir, err := os.MkdirTemp("", "captchaq-fake-providers-")
	if err != nil {
		return nil, nil, nil, err
	}
	var stops []func()
	stop = func() {
		for _, f := range stops {
			f()
		}
		os.RemoveAll(dir)
	}
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(fakeapi.TestKey+"\n"), 0o600); err != nil {
		stop()
		return nil, nil, nil, err
	}
	seed := time.Now().UnixNano()
	plan := fakeapi.New(fakeapi.Config{TimeScale: 1 / speed, Seed: seed, Threads: fakePlanThreads})
	spare := fakeapi.New(fakeapi.Config{TimeScale: 1 / speed, Seed: seed + 1, Service: fakeapi.Service2Captcha, Price: fakeSparePrices})
	var urls []string
	for _, api := range []*fakeapi.Server{plan, spare} {
		url, stopAPI, err := fakeapi.ServeLocal(api)
		if err != nil {
			stop()
			return nil, nil, nil, err
		}
		stops = append(stops, stopAPI)
		urls = append(urls, url)
	}
	f := provider.File{Providers: []provider.Entry{
		{Name: "captchaai", Dialect: provider.Classic, BaseURL: urls[0], Service: fakeapi.ServiceCaptchaAI, KeyFile: keyFile,
			Billing: provider.Billing{Threads: fakePlanThreads}, Role: provider.Primary},
		{Name: "2captcha", Dialect: provider.Classic, BaseURL: urls[1], Service: fakeapi.Service2Captcha, KeyFile: keyFile,
			Methods: []string{captcha.MethodReCaptcha, captcha.MethodBase64, captcha.MethodPost}, Billing: provider.Billing{Per1000: fakeSparePrices}, Role: provider.Overflow},
	}}
	base, err := s.baseConfig(solver.Timing{Scale: 1 / speed}, nil)
	if err == nil {
		set, err = provider.Open(f, base, provider.Config{Logger: s.log, Now: s.now, Overflow: policy})
	}
	if err != nil {
		stop()
		return nil, nil, nil, fmt.Errorf("--fake-providers: %w", err)
	}
	bills = func(w io.Writer) {
		for i, api := range []*fakeapi.Server{plan, spare} {
			var b strings.Builder
			prices := "userrecaptcha=2.99,base64=1,post=1"
			if i == 0 {
				prices = "" // the emulator's own price, which the plan does not charge
			}
			printMoney(&b, api.Stats(), prices)
			fmt.Fprint(w, strings.ReplaceAll(b.String(), "fakeapi:", "fakeapi "+f.Providers[i].Name+":"))
		}
	}
	return set, bills, stop, nil
}
