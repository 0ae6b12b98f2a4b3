package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// runFakeAPI serves the emulator of the solving service until ctx is done.
func runFakeAPI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("fakeapi", "[flags]\n\n"+
		"Serves the classic in.php/res.php and the JSON task dialect (POST /createTask, /getTaskResult,\n"+
		"/getBalance, the report calls) on the same captchas, bill and faults: a providers file names\n"+
		"it with dialect classic or tasks.\n\n"+
		"Failure on demand: a task whose site key (sitekey, googlekey, gt or captcha_id) is\n"+
		"  perm-fail    gets ERROR_WRONG_GOOGLEKEY from in.php, every time (dead at once, permanent)\n"+
		"  unsolvable   gets ERROR_CAPTCHA_UNSOLVABLE from res.php, every time (retried, then dead)\n"+
		"  flaky-N      gets ERROR_CAPTCHA_UNSOLVABLE the first N times per site key and page URL, then an answer", stdout)
	addr := fs.String("addr", "127.0.0.1:8088", "address to listen on (host:port; port 0 picks one)")
	threads := fs.Int("plan-threads", 0, "the emulated plan's threads: captchas solved at once, over which in.php answers ERROR_ZERO_BALANCE; 0 = unlimited")
	noSlot := fs.Bool("no-slot-code", false, "answer ERROR_NO_SLOT_AVAILABLE instead of ERROR_ZERO_BALANCE when all threads are busy")
	seed := fs.Int64("seed", 1, "seed of solve times, faults, ids and tokens")
	speed := fs.Float64("speed", 1, "solve speed relative to real time (10 = ten times faster)")
	numericIDs := fs.Bool("numeric-ids", false, "send captcha ids as JSON numbers")
	batchPolls := fs.Bool("batch-polls", false, "answer multi-id polls (res.php action=get&ids=…), which CaptchaAI does not document; off, ids are ignored as on CaptchaAI")
	service := fs.String("service", fakeapi.ServiceCaptchaAI, "the service emulated: captchaai or 2captcha (2captcha: no cloudflare_challenge, bls or geetest version=4; a full plan answers ERROR_NO_SLOT_AVAILABLE)")
	noFunds := fs.Bool("no-funds", false, "with --service 2captcha, answer every submission ERROR_ZERO_BALANCE (an account without money)")
	geetestString := fs.Bool("geetest-as-string", false, "send GeeTest answers as a JSON-encoded string")
	unsolvable := fs.Float64("unsolvable", 0, "rate of ERROR_CAPTCHA_UNSOLVABLE answers, 0..1")
	http500 := fs.Float64("http500", 0, "rate of HTTP 500 replies, 0..1")
	html := fs.Float64("html", 0, "rate of HTML-page replies, 0..1")
	garbage := fs.Float64("garbage", 0, "rate of garbage replies, 0..1")
	slow := fs.Float64("slow", 0, "rate of slow replies, 0..1")
	slowDelay := fs.Duration("slow-delay", 5*time.Second, "delay of a slow reply")
	failPage := fs.String("fail-pageurl", "", "tasks whose pageurl contains this fail with --fail-code")
	addrFile := fs.String("addr-file", "", "once listening, write the address (host:port) to this file, removed again as the emulator stops: "+
		"a script waits for it, and stops when it never comes (the port taken)")
	prices := fs.String("price", "", "what 1000 accepted captchas cost, by method (userrecaptcha=2.99,base64=1), as a providers file states it, so that the bill at exit can be set against `captchaq stats`; a method not named costs "+strconv.FormatFloat(fakeapi.DefaultPricePer1000, 'f', -1, 64))
	failCode := fs.String("fail-code", classic.CodePageURL, "code for tasks matching --fail-pageurl")
	if err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	if *speed <= 0 {
		return usageError("--speed %v: must be positive", *speed)
	}
	if *service != fakeapi.ServiceCaptchaAI && *service != fakeapi.Service2Captcha {
		return usageError("--service %q: want captchaai or 2captcha", *service)
	}
	if *noFunds && *service != fakeapi.Service2Captcha {
		return usageError("--no-funds needs --service 2captcha: on CaptchaAI ERROR_ZERO_BALANCE means a full plan (--plan-threads)")
	}
	for name, r := range map[string]float64{"unsolvable": *unsolvable, "http500": *http500, "html": *html, "garbage": *garbage, "slow": *slow} {
		if r < 0 || r > 1 {
			return usageError("--%s %v: must be in 0..1", name, r)
		}
	}
	price, err := parsePrices(*prices)
	if err != nil {
		return usageError("--price: %v", err)
	}
	f := fakeapi.Faults{Unsolvable: *unsolvable, HTTP500: *http500, HTML: *html, Garbage: *garbage, Slow: *slow, SlowDelay: *slowDelay}
	if *failPage != "" {
		f.Rules = []fakeapi.Rule{{Param: "pageurl", Contains: *failPage, Code: *failCode}}
	}
	api := fakeapi.New(fakeapi.Config{
		Threads: *threads, NoSlotCode: *noSlot, Seed: *seed, TimeScale: 1 / *speed,
		NumericIDs: *numericIDs, GeeTestAsString: *geetestString, Faults: f,
		BatchPolls: *batchPolls, Service: *service, NoFunds: *noFunds, Price: price,
	})
	if *addrFile != "" {
		// A file left by an emulator that was killed must not pass for
		// this one's.
		if err := os.Remove(*addrFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("--addr-file: %w", err)
		}
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var wrote error
	listened := false
	err = api.ListenAndServe(ctx, *addr, func(a net.Addr) {
		listened = true
		if *addrFile != "" {
			// Without it a script would wait for ever: stop instead.
			if wrote = writeAddrFile(*addrFile, a.String()); wrote != nil {
				stop()
				return
			}
		}
		fmt.Fprintf(stdout, "fakeapi listening on http://%s (key %s)\n", a, fakeapi.TestKey)
	})
	if wrote != nil {
		return fmt.Errorf("--addr-file: %w", wrote)
	}
	if !listened {
		// Nothing was served, so nothing was paid: a bill of 0 would
		// read as if an emulator had run.
		return portTaken(err, "--addr", "the address it got goes to --addr-file and stdout")
	}
	if *addrFile != "" {
		_ = os.Remove(*addrFile)
	}
	printMoney(stdout, api.Stats(), *prices)
	return err
}

// parsePrices reads --price: method=price per 1000 pairs, comma-separated.
func parsePrices(s string) (map[string]float64, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]float64{}
	for _, pair := range strings.Split(s, ",") {
		method, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		p, err := strconv.ParseFloat(v, 64)
		switch {
		case !ok || method == "":
			return nil, fmt.Errorf("%q: want method=price", pair)
		case err != nil || p < 0 || math.IsNaN(p) || math.IsInf(p, 0):
			return nil, fmt.Errorf("%s: price %q: want a number of 0 or more", method, v)
		}
		out[method] = p
	}
	return out, nil
}

// printMoney says what the emulated account paid, at the emulator's exit:
// the captchas accepted and refunded, the balance left, and every task
// paid for more than once (fakeapi.Stats.PerTask), by its key (the page by
// host only).
func printMoney(w io.Writer, st fakeapi.Stats, prices string) {
	at := fmt.Sprintf("at %.2f per 1000, the emulator's price", fakeapi.DefaultPricePer1000)
	if prices != "" {
		at = "at --price " + prices
	}
	fmt.Fprintf(w, "fakeapi: %d captchas accepted, %d refunded as unsolvable; %.5f spent, balance %.5f (%s)\n",
		st.Submitted, st.Refunded, st.Spent, st.Balance, at)
	rep := st.Repeated()
	if len(rep) == 0 {
		fmt.Fprintln(w, "fakeapi: no task was paid for more than once")
		return
	}
	keys := slices.Sorted(maps.Keys(rep))
	extra := 0
	for _, k := range keys {
		extra += rep[k] - 1
	}
	fmt.Fprintf(w, "fakeapi: %d tasks paid for more than once (%d captchas paid again):\n", len(rep), extra)
	for _, k := range keys {
		fmt.Fprintf(w, "  %d× %s\n", rep[k], k)
	}
}

// writeAddrFile writes addr and a newline to path whole, then renamed: a
// script waiting for the file never reads half of it.
func writeAddrFile(path, addr string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(addr+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
