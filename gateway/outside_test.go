package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// A task that died on a code about the workers' exchange with the service,
// not about the captcha, answers ERROR_CAPTCHA_UNSOLVABLE: passed on, the
// code would tell a caller something false. CaptchaAI's guides poll on
// through ERROR_SERVER_ERROR ("TRANSIENT_ERRORS = {"ERROR_SERVER_ERROR",
// "ERROR_INTERNAL_SERVER_ERROR"}", CaptchaAI-Examples
// articles/how-to-solve-*-using-api/python/solve.py), so a dead task
// answering it would be polled until the script's own timeout; and
// ERROR_WRONG_CAPTCHA_ID from res.php says the id is not the caller's.
func TestDeadTaskOnAnExchangeCodeAnswersUnsolvable(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"ERROR_SERVER_ERROR", "ERROR_WRONG_CAPTCHA_ID"} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil, streamtest.WithMaxAttempts(1),
				streamtest.WithFaults(fakeapi.Faults{Rules: []fakeapi.Rule{{Code: code, OnPoll: code == "ERROR_WRONG_CAPTCHA_ID"}}}))
			id := b.submit(t, alice)
			require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", b.await(t, alice, id))
			var res struct {
				Request   string `json:"request"`
				ErrorText string `json:"error_text"`
			}
			require.NoError(t, json.Unmarshal([]byte(b.call(t, "res.php", "key", alice.Key, "action", "get", "id", id, "json", "1")), &res))
			require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", res.Request)
			require.Contains(t, res.ErrorText, code, "error_text still says what happened")
		})
	}
}

// An image over the body's bound gets the service's code for an image too
// big (ERROR_TOO_BIG_CAPTCHA_FILESIZE: solver/testdata/service/replies.json),
// as one just over the image limit does, in the dialect the caller asked
// for with json=1 among the fields sent before the file.
func TestImageOverTheBodyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	for _, size := range []int{solver.MaxImageSize + 1, 3 * solver.MaxImageSize} {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		require.NoError(t, mw.WriteField("key", alice.Key))
		require.NoError(t, mw.WriteField("method", "post"))
		require.NoError(t, mw.WriteField("json", "1"))
		fw, err := mw.CreateFormFile("file", "captcha.png")
		require.NoError(t, err)
		_, err = fw.Write(bytes.Repeat([]byte{0x89}, size))
		require.NoError(t, err)
		require.NoError(t, mw.Close())
		resp, err := http.Post(b.url+"/in.php", mw.FormDataContentType(), &body)
		require.NoError(t, err)
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		var res struct {
			Status  int    `json:"status"`
			Request string `json:"request"`
		}
		require.NoError(t, json.Unmarshal(out, &res), "size %d: %s", size, out)
		require.Equal(t, "ERROR_TOO_BIG_CAPTCHA_FILESIZE", res.Request, "size %d", size)
	}
	// The same through base64 in an urlencoded body.
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89}, 3*solver.MaxImageSize))
	require.Equal(t, "ERROR_TOO_BIG_CAPTCHA_FILESIZE", b.post(t, "in.php", "key", alice.Key, "method", "base64", "body", big))
}

// post sends the fields as an urlencoded POST body to the gateway's op and
// returns the reply's body.
func (b *bundle) post(t *testing.T, op string, kv ...string) string {
	t.Helper()
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	resp, err := http.PostForm(b.url+"/"+op, v)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return string(body)
}

// cutProxy forwards TCP connections to a NATS server until cut, which
// closes its listener and every connection, so a client on it reconnects
// in vain; restore listens again on the same address.
type cutProxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	l      net.Listener
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	p := &cutProxy{t: t, target: strings.TrimPrefix(target, "nats://")}
	p.listen("127.0.0.1:0")
	t.Cleanup(p.cut)
	return p
}

func (p *cutProxy) listen(addr string) {
	l, err := net.Listen("tcp", addr)
	require.NoError(p.t, err)
	p.mu.Lock()
	p.l, p.addr = l, l.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.l.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) restore() { p.listen(p.addr) }

// With the broker out of reach, in.php answers ERROR_SERVER_ERROR (which
// callers retry: CaptchaAI-Examples' TRANSIENT_ERRORS) at once instead of
// holding the caller until it hangs up, and the refused task is not
// enqueued behind the caller's back when the connection comes back.
func TestSubmitWhileTheBrokerIsUnreachable(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithListen(), streamtest.WithWorkers(0))
	proxy := newCutProxy(t, env.URL())
	disconnected, reconnected := make(chan struct{}, 1), make(chan struct{}, 1)
	nc, err := nats.Connect("nats://"+proxy.addr, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnected <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	b := serve(t, env, gateway.Config{Conn: nc, Topology: env.Topology, Keys: []gateway.Key{alice}, Now: env.Now})

	proxy.cut()
	<-disconnected
	client := &http.Client{Timeout: 20 * time.Second}
	v := url.Values{"key": {alice.Key}}
	for i := 0; i+1 < len(turnstile); i += 2 {
		v.Set(turnstile[i], turnstile[i+1])
	}
	start := time.Now()
	resp, err := client.Get(b.url + "/in.php?" + v.Encode())
	require.NoError(t, err, "in.php held the caller")
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, "ERROR_SERVER_ERROR", string(out))
	require.Less(t, time.Since(start), 15*time.Second)

	proxy.restore()
	<-reconnected
	require.NoError(t, nc.Flush())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tasks, err := env.Client.Tasks(ctx, stream.TaskFilter{})
	require.NoError(t, err)
	require.Empty(t, tasks, "a task refused to the caller was enqueued after all")
}

// An outcome stored while the gateway's connection is down reaches it when
// the connection comes back: the caller's poll and pingback get it, not
// CAPCHA_NOT_READY until the task's deadline.
func TestOutcomeStoredWhileTheGatewayWasCutOff(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithListen(), streamtest.WithWorkers(0))
	proxy := newCutProxy(t, env.URL())
	disconnected := make(chan struct{}, 1)
	nc, err := nats.Connect("nats://"+proxy.addr, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { disconnected <- struct{}{} }))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	cb, pingURL := newCallbacks(t, 0)
	b := serve(t, env, gateway.Config{Conn: nc, Topology: env.Topology, Keys: []gateway.Key{alice}, Now: env.Now,
		Pingback: gateway.Pingback{Backoff: 10 * time.Millisecond, Allow: testHooks}})
	out := b.call(t, "in.php", append([]string{"key", alice.Key, "pingback", pingURL}, turnstile...)...)
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	id := strings.TrimPrefix(out, "OK|")

	proxy.cut()
	<-disconnected
	env.StartWorker(env.WorkerConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	solved, err := env.Client.Wait(ctx, "alice-"+id)
	require.NoError(t, err)
	proxy.restore()
	require.Equal(t, "OK|"+solved.Text(), b.await(t, alice, id))
	select {
	case q := <-cb.got:
		require.Equal(t, id, q.Get("id"))
	case <-ctx.Done():
		t.Fatal("no pingback")
	}
}

// in.php's action is a task parameter, reCAPTCHA v3's and Turnstile's page
// action ("action": CAPTCHA_ACTION in CaptchaAI-Examples
// articles/how-to-solve-recaptcha-v3-automatically-using-api/python/solve.py):
// the task the gateway enqueues carries it, for the workers to send.
func TestActionIsATaskParameter(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(b.env.Connect())
	require.NoError(t, err)
	name := b.env.Topology.Stream
	if name == "" {
		name = stream.DefaultStream
	}
	s, err := js.Stream(ctx, name)
	require.NoError(t, err)
	for _, fields := range [][]string{
		{"method", "userrecaptcha", "version", "v3", "action", "checkout-step-2", "min_score", "0.3",
			"googlekey", "6LfD3PIbAAAAAJs_eEHvoOl75_83eXSqpPSRFJ_u", "pageurl", "https://shop.example/checkout"},
		append([]string{"action", "checkout-step-2"}, turnstile...),
	} {
		out := b.call(t, "in.php", append([]string{"key", alice.Key}, fields...)...)
		require.True(t, strings.HasPrefix(out, "OK|"), out)
		m, err := s.GetLastMsgForSubject(ctx, "captcha.tasks.>")
		require.NoError(t, err)
		var task stream.Task
		require.NoError(t, json.Unmarshal(m.Data, &task))
		require.Equal(t, "alice-"+strings.TrimPrefix(out, "OK|"), task.ID)
		require.Equal(t, "checkout-step-2", task.Params["action"], "the action of %s", task.Method)
	}
}
