package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
	"github.com/captchaq/captchaq/stream/wire"
)

// A caller's reportbad reports its own task's captcha, whatever another
// producer submitted under its id since: here a valid task under the same
// id after the duplicate window, solved after the caller's. The report
// names the caller's generation, so the worker that makes it compares the
// captcha id with that generation's outcome, not with the latest under
// the id.
func TestReportOfTheCallersOwnGenerationAfterALaterTask(t *testing.T) {
	rb := newRoleBed(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: 10 * time.Millisecond, Max: 10 * time.Millisecond},
		fakeapi.KindRecaptcha: {Min: time.Millisecond, Max: time.Millisecond}}}, stream.Topology{DuplicateWindow: time.Second}, nil)
	rb.startWorker(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop, err := gateway.ServeReports(ctx, rb.conn(t, "worker"), rb.top, rb.sc, nil)
	require.NoError(t, err)
	t.Cleanup(stop)

	num := rb.submit(t, alice)
	id := "alice-" + num
	got := rb.await(t, alice, num)
	require.True(t, strings.HasPrefix(got, "OK|"), got)

	attacker, err := stream.NewClient(ctx, rb.conn(t, "producer"), stream.ClientConfig{Topology: rb.top, Name: "mallory"})
	require.NoError(t, err)
	evil := stream.Task{ID: id, Method: "userrecaptcha", Priority: stream.PriorityHigh,
		Params: stream.Params{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://evil.example/"}}
	require.Eventually(t, func() bool {
		r, err := attacker.Submit(ctx, evil)
		require.NoError(t, err)
		return !r.Duplicate
	}, 20*time.Second, 50*time.Millisecond, "the id leaves the duplicate window")
	_, err = attacker.Wait(ctx, id)
	require.NoError(t, err, "the attacker's task is solved")
	require.Equal(t, got, rb.call(t, "res.php", "key", alice.Key, "action", "get", "id", num), "res.php still answers the caller's own")

	require.Equal(t, "OK_REPORT_RECORDED", rb.call(t, "res.php", "key", alice.Key, "action", "reportbad", "id", num),
		"the caller's report of its own answer")
	require.Equal(t, 1, rb.api.Stats().ReportsBad)
	require.Equal(t, 2, rb.api.Stats().Submitted, "each task paid once")
}

// stalledBody is a request body whose first part the gateway has read
// once Write returns, and whose rest never comes until the test ends.
func stalledBody(t *testing.T, first string) io.Reader {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = pw.Write([]byte(first))
	}()
	t.Cleanup(func() { pr.Close() })
	return &firstRead{Reader: pr, done: done}
}

type firstRead struct {
	io.Reader
	done chan struct{}
}

// One client address that stalls its uploads (an urlencoded in.php whose
// key field would come last, never sent) holds at most a few of the turns
// to read bodies before their key is known: a caller at another address
// that sends its key in the body, as 2captcha-python's in.php does (a
// POST form), is served, not refused MAX_USER_TURN.
func TestOneAddressDoesNotHoldEveryUnauthenticatedTurn(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) { c.Admission = gateway.Admission{UnauthenticatedWait: 2 * time.Second} }, streamtest.WithWorkers(0))
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	bodies := make([]*firstRead, 0, gateway.DefaultPerAddress)
	for range gateway.DefaultPerAddress {
		body := stalledBody(t, "method=base64&body=AAAA&").(*firstRead)
		bodies = append(bodies, body)
		r := httptest.NewRequest(http.MethodPost, "/in.php", body)
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = "203.0.113.9:40000"
		wg.Add(1)
		go func() { defer wg.Done(); b.gw.ServeHTTP(httptest.NewRecorder(), r) }()
	}
	// Each stalled upload is being read: its turn is held (or it was
	// refused without one, and its body was never read: then it is not
	// the attacker's to hold).
	held := heldWithin(bodies, 3*time.Second)
	t.Logf("uploads from one address being read: %d", held)
	require.Equal(t, gateway.DefaultUnauthenticatedPerAddress, held, "bodies read at once from one address before their key is known")

	answer := b.keyInBodyInPHP()
	require.True(t, strings.HasPrefix(answer, "OK|"), "another address's caller with its key in the body: %s", answer)
}

// keyInBodyInPHP posts alice's Turnstile in.php with its key among the
// form's fields, as 2captcha-python does, from an address of its own, and
// returns the answer.
func (b *bundle) keyInBodyInPHP() string {
	v := url.Values{"key": {alice.Key}}
	for i := 0; i+1 < len(turnstile); i += 2 {
		v.Set(turnstile[i], turnstile[i+1])
	}
	r := httptest.NewRequest(http.MethodPost, "/in.php", strings.NewReader(v.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "198.51.100.7:50000"
	w := httptest.NewRecorder()
	b.gw.ServeHTTP(w, r)
	return w.Body.String()
}

// Unknown keys from one IPv6 /64 (one subscriber's network: every address
// in it is the same client's to choose) ban that network, as unknown keys
// from one IPv4 address ban it.
func TestUnknownKeysFromOneIPv6NetworkBanIt(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) { c.Admission = gateway.Admission{BadKeys: 3} }, streamtest.WithWorkers(0))
	ask := func(remote, key string) string {
		r := httptest.NewRequest(http.MethodGet, "/res.php?action=getbalance&key="+key, nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		b.gw.ServeHTTP(w, r)
		return w.Body.String()
	}
	for i := range 4 {
		ask(netip.AddrPortFrom(netip.MustParseAddr("2001:db8:7:8::"+strings.Repeat("1", i+1)), 40000).String(), "wrong-key-0123456789")
	}
	require.Equal(t, "IP_BANNED", ask("[2001:db8:7:8::abcd]:40001", alice.Key), "another address of the same /64")
	require.Equal(t, "100", ask("[2001:db8:7:9::1]:40001", alice.Key), "another /64 is not banned")
}

// Special-purpose addresses that are not public unicast (IANA's
// special-purpose registries: not globally reachable, or embedding an
// IPv4 address a gateway's host may route inward) are refused as
// pingbacks, like the classes TestPingbackAddressesRefusedAtSubmit names.
func TestPingbackSpecialPurposeAddressesRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) { c.Pingback = gateway.Pingback{} }, streamtest.WithWorkers(0))
	cases := map[string]string{
		"this network 0/8":           "http://0.1.2.3/",
		"reserved 240/4":             "http://240.0.0.1/",
		"documentation 192.0.2/24":   "http://192.0.2.1/",
		"documentation 198.51.100":   "http://198.51.100.1/",
		"documentation 203.0.113":    "http://203.0.113.1/",
		"IPv4-compatible loopback":   "http://[::127.0.0.1]/",
		"local-use NAT64 (RFC 8215)": "http://[64:ff9b:1::7f00:1]/",
		"site-local v6":              "http://[fec0::1]/",
		"discard-only v6":            "http://[100::1]/",
		"Teredo (embeds IPv4)":       "http://[2001::1]/",
		"documentation v6":           "http://[2001:db8::1]/",
	}
	for name, hook := range cases {
		out := b.call(t, "in.php", append([]string{"key", alice.Key, "pingback", hook, "json", "1"}, turnstile...)...)
		require.Contains(t, out, `"request":"ERROR_BAD_PARAMETERS"`, "%s: %s", name, hook)
	}
	require.Zero(t, b.env.Emulator.Stats().Submitted)
}

// A key whose default deadline is further away than the stream keeps
// tasks (a key file edited wrongly: "48h" for "48m") is refused when the
// gateway starts, naming the entry, not with every in.php of the key.
func TestKeyDeadlineBeyondRetentionRefusedAtStart(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	long := alice
	long.Deadline = gateway.Duration(48 * time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, err := gateway.New(ctx, gateway.Config{Conn: env.Connect(), Topology: env.Topology, Keys: []gateway.Key{long, bob}, Now: env.Now})
	if err == nil {
		t.Cleanup(gw.Close)
		srv := httptest.NewServer(gw)
		t.Cleanup(srv.Close)
		b := &bundle{env: env, gw: gw, url: srv.URL}
		t.Fatalf("the gateway started; the key's in.php answers %s", b.call(t, "in.php", append([]string{"key", long.Key}, turnstile...)...))
	}
	require.Contains(t, err.Error(), "alice")
	require.Contains(t, err.Error(), "deadline")
	require.NotContains(t, err.Error(), alice.Key, "never the secret")
}

// A caller that posts a JSON body (@2captcha/captcha-solver posts in.php
// so, json=1 inside the body) and is refused before its body is read
// (IP_BANNED here) is answered in JSON: its body says it speaks JSON.
func TestRefusalOfAJSONBodyIsJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) { c.Admission = gateway.Admission{BadKeys: 1} }, streamtest.WithWorkers(0))
	for range 2 {
		b.call(t, "res.php", "key", "wrong-key-0123456789", "action", "getbalance")
	}
	for _, op := range []string{"in.php", "res.php"} {
		resp, err := http.Post(b.url+"/"+op, "application/json", strings.NewReader(`{"key":"`+alice.Key+`","json":1,"action":"getbalance"}`))
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(body), `{"status":0,"request":"IP_BANNED"`), "%s: %s", op, body)
	}
}

// After a gateway restart, a task submitted before it is answered by its
// own generation (docs/security.md): a forged message under the id
// (another Nats-Msg-Id, ended INVALID_ENVELOPE) that a producer publishes
// after the restart is not the caller's answer.
func TestForgedMessageAfterRestartIsNotTheAnswer(t *testing.T) {
	rb := newRoleBed(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: 10 * time.Millisecond, Max: 10 * time.Millisecond}}},
		stream.Topology{}, nil)
	rb.startWorker(t, 1)
	num := rb.submit(t, alice)
	id := "alice-" + num
	got := rb.await(t, alice, num)
	require.True(t, strings.HasPrefix(got, "OK|"), got)

	// The restart: a new gateway, on a new connection, knows no generation.
	rb.gw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, err := gateway.New(ctx, gateway.Config{Conn: rb.conn(t, "producer"), Topology: rb.top, Keys: []gateway.Key{alice, bob}})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	after := &bundle{gw: gw, url: srv.URL}
	require.Equal(t, got, after.call(t, "res.php", "key", alice.Key, "action", "get", "id", num), "answered from the stream")

	m := nats.NewMsg(wire.TaskSubject(stream.LaneOf("turnstile", nil), stream.PriorityHigh, id))
	m.Data = []byte(turnstileBody)
	m.Header.Set("Nats-Msg-Id", id+"-forged")
	js, err := jetstream.New(rb.conn(t, "producer"))
	require.NoError(t, err)
	_, err = js.PublishMsg(ctx, m)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, o := range rb.outcomesOf(t, id) {
			if o.Error == stream.CodeInvalidEnvelope {
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "the forged message ended INVALID_ENVELOPE")
	require.Equal(t, got, after.call(t, "res.php", "key", alice.Key, "action", "get", "id", num), "a forged outcome answers the caller after a restart")
	require.Equal(t, 1, rb.api.Stats().Submitted)
}

// After a gateway restart, a valid task another producer submits under a
// caller's id once the duplicate window has passed is the latest valid
// submission under the id, but not the caller's: res.php answers the
// caller its own generation's outcome, which the restarted gateway reads
// from the task's records.
func TestLaterTaskAfterRestartIsNotTheAnswer(t *testing.T) {
	rb := newRoleBed(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: 10 * time.Millisecond, Max: 10 * time.Millisecond},
		fakeapi.KindRecaptcha: {Min: time.Millisecond, Max: time.Millisecond}}}, stream.Topology{DuplicateWindow: time.Second}, nil)
	rb.startWorker(t, 1)
	num := rb.submit(t, alice)
	id := "alice-" + num
	got := rb.await(t, alice, num)
	require.True(t, strings.HasPrefix(got, "OK|"), got)

	rb.gw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, err := gateway.New(ctx, gateway.Config{Conn: rb.conn(t, "producer"), Topology: rb.top, Keys: []gateway.Key{alice, bob}})
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	after := &bundle{gw: gw, url: srv.URL}

	attacker, err := stream.NewClient(ctx, rb.conn(t, "producer"), stream.ClientConfig{Topology: rb.top, Name: "mallory"})
	require.NoError(t, err)
	evil := stream.Task{ID: id, Method: "userrecaptcha", Priority: stream.PriorityHigh,
		Params: stream.Params{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://evil.example/"}}
	require.Eventually(t, func() bool {
		r, err := attacker.Submit(ctx, evil)
		require.NoError(t, err)
		return !r.Duplicate
	}, 20*time.Second, 50*time.Millisecond, "the id leaves the duplicate window")
	mine, err := attacker.Wait(ctx, id)
	require.NoError(t, err)
	require.NotEqual(t, "OK|"+mine.Text(), after.call(t, "res.php", "key", alice.Key, "action", "get", "id", num),
		"the caller is handed the attacker's token")
	require.Equal(t, got, after.call(t, "res.php", "key", alice.Key, "action", "get", "id", num))
	require.Equal(t, 2, rb.api.Stats().Submitted, "two captchas paid: the caller's and the attacker's")
}

// A caller at one address that uploads more bodies at once than its turns
// (a script's threads, each posting an image with its key in the body)
// waits for its address's turn and is served, not refused MAX_USER_TURN.
func TestOneAddressUploadsOverItsTurnsWait(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	const addr = "198.51.100.7:50000"
	var (
		wg     sync.WaitGroup
		closes []func()
	)
	t.Cleanup(wg.Wait)
	for range gateway.DefaultUnauthenticatedPerAddress {
		pr, pw := io.Pipe()
		closes = append(closes, func() { pw.Close() })
		t.Cleanup(func() { pw.Close(); pr.Close() })
		r := httptest.NewRequest(http.MethodPost, "/in.php", pr)
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = addr
		wg.Add(1)
		go func() { defer wg.Done(); b.gw.ServeHTTP(httptest.NewRecorder(), r) }()
		_, err := pw.Write([]byte("method=base64&body=AAAA&")) // returns once the gateway reads it
		require.NoError(t, err)
	}
	v := url.Values{"key": {alice.Key}}
	for i := 0; i+1 < len(turnstile); i += 2 {
		v.Set(turnstile[i], turnstile[i+1])
	}
	r := httptest.NewRequest(http.MethodPost, "/in.php", strings.NewReader(v.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = addr
	w := httptest.NewRecorder()
	served := make(chan struct{})
	go func() { defer close(served); b.gw.ServeHTTP(w, r) }()
	closes[0]() // one upload ends: its turn is free
	<-served
	require.True(t, strings.HasPrefix(w.Body.String(), "OK|"), w.Body.String())
}

// A request whose key, sent in the body, is known counts against its key's
// limits from then on, not its address's count of requests whose key is
// not known: a script behind one address with more requests in the gateway
// at once than that count (here reportbad requests that a worker is slow
// to answer, as an in.php is while the broker stores its task) is served.
func TestKnownKeyInTheBodyLeavesTheAddressCount(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	num := b.submit(t, alice)
	require.True(t, strings.HasPrefix(b.await(t, alice, num), "OK|"))
	// A worker that takes every report and answers only when released.
	release := make(chan struct{})
	nc := b.env.Connect()
	var held sync.WaitGroup
	sub, err := nc.Subscribe(gateway.ReportSubject, func(m *nats.Msg) {
		held.Add(1)
		go func() {
			defer held.Done()
			<-release
			_ = m.Respond([]byte(`{"code":"OK_REPORT_RECORDED"}`))
		}()
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush(), "the subscription is the server's before any request")
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	const n = gateway.DefaultPerAddress + 4
	answers := make(chan string, n)
	for range n {
		go func() {
			body := url.Values{"key": {alice.Key}, "action": {"reportbad"}, "id": {num}}.Encode()
			r := httptest.NewRequest(http.MethodPost, "/res.php", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.RemoteAddr = "198.51.100.7:50000"
			w := httptest.NewRecorder()
			b.gw.ServeHTTP(w, r)
			answers <- w.Body.String()
		}()
	}
	// Every request reaches the worker, or is answered without it.
	var early []string
	require.Eventually(t, func() bool {
		for {
			select {
			case a := <-answers:
				early = append(early, a)
				continue
			default:
			}
			break
		}
		delivered, _ := sub.Delivered()
		return int(delivered)+len(early) == n
	}, 20*time.Second, 10*time.Millisecond)
	close(release)
	require.Empty(t, early, "requests answered before the worker's answer: refused by the address's count")
	for range n {
		require.Equal(t, "OK_REPORT_RECORDED", <-answers)
	}
	held.Wait()
}

// A forged message under a gateway caller's id that names the caller's own
// generation (Captchaq-Gen, as a worker's moved copy does, with a store
// time; a producer reads the generation on captcha.stored.events) is not a
// copy of that generation: the caller is answered its own task's token, and
// one in.php is paid.
func TestForgedCopyNamingTheCallersGenerationIsNotItsAnswer(t *testing.T) {
	rb := newRoleBed(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: time.Second, Max: time.Second}}},
		stream.Topology{}, nil)
	num := rb.submit(t, alice)
	id := "alice-" + num
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ti, err := rb.admin.TaskOf(ctx, id)
	require.NoError(t, err)
	require.NotZero(t, ti.Gen)

	js, err := jetstream.New(rb.conn(t, "producer"))
	require.NoError(t, err)
	for i, subject := range []string{
		wire.TaskSubject(stream.LaneOf("turnstile", nil), stream.PriorityHigh, id),
		wire.TaskSubject(stream.LaneOf("turnstile", nil), stream.PriorityNormal, id),
	} {
		m := nats.NewMsg(subject)
		m.Data = []byte(`{"method":"turnstile","params":{"sitekey":"0x4AAAAAAABkMYinukE8nzY","pageurl":"https://evil.example/"}}`)
		m.Header.Set("Nats-Msg-Id", id+".moved."+strconv.Itoa(i+1))
		m.Header.Set(wire.HeaderGen, strconv.FormatUint(ti.Gen, 10))
		m.Header.Set(wire.HeaderSubmitted, time.Now().UTC().Format(time.RFC3339Nano))
		_, err = js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	rb.startWorker(t, 2)
	got := rb.await(t, alice, num)
	require.True(t, strings.HasPrefix(got, "OK|"), "%s; outcomes under the id: %+v", got, rb.outcomesOf(t, id))
	require.Eventually(t, func() bool { return len(rb.outcomesOf(t, id)) == 3 }, 20*time.Second, 20*time.Millisecond)
	for _, o := range rb.outcomesOf(t, id) {
		if o.Gen == ti.Gen {
			require.Equal(t, stream.StatusSolved, o.Status, "the caller's generation's outcome is its own solve: %+v", o)
		}
	}
	require.Equal(t, 1, rb.api.Stats().Submitted, "the forged copies are paid nothing")
}
