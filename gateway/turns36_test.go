package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"image"
	"image/png"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// stallFrom starts an in.php upload from remote (an urlencoded body whose
// key field would come last, never sent) straight into the gateway's
// handler, and returns its body (done once the gateway read its first
// part) and a channel that gets the handler's answer.
func (b *bundle) stallFrom(t *testing.T, wg *sync.WaitGroup, remote string) (*firstRead, <-chan *httptest.ResponseRecorder) {
	body := stalledBody(t, "method=base64&body=AAAA&").(*firstRead)
	r := httptest.NewRequest(http.MethodPost, "/in.php", body)
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = remote
	answered := make(chan *httptest.ResponseRecorder, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		w := httptest.NewRecorder()
		b.gw.ServeHTTP(w, r)
		answered <- w
	}()
	return body, answered
}

// Close ends the stalled body, as a connection's read deadline ends a
// server's request body.
func (f *firstRead) Close() error {
	if c, ok := f.Reader.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// noisePNG is a PNG of side×side pixels of noise, which PNG cannot
// compress: about side² bytes.
func noisePNG(t *testing.T, side int) []byte {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, side, side))
	_, _ = rand.Read(img.Pix)
	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, img))
	return buf.Bytes()
}

// heldWithin counts the stalled uploads the gateway is reading (their
// first part read) within d.
func heldWithin(bodies []*firstRead, d time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	held := 0
	for _, body := range bodies {
		select {
		case <-body.done:
			held++
		case <-ctx.Done():
			// Both may be ready: a body read counts whatever the
			// select drew.
			select {
			case <-body.done:
				held++
			default:
			}
		}
	}
	return held
}

// multipartInPHP posts an image to in.php as 2captcha's SDKs upload one
// (method=post, the image as the multipart part "file"), over TCP from
// 127.0.0.1, with its key after the image when keyLast (the worst case:
// the whole body is read before the key is known), through body's pace
// (nil: at once); it returns the HTTP status and the answer.
func (b *bundle) multipartInPHP(t *testing.T, image []byte, keyLast bool, pace func(io.Reader) io.Reader) (int, string) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if !keyLast {
		require.NoError(t, mw.WriteField("key", alice.Key))
	}
	require.NoError(t, mw.WriteField("method", "post"))
	fw, err := mw.CreateFormFile("file", "captcha.png")
	require.NoError(t, err)
	_, err = fw.Write(image)
	require.NoError(t, err)
	if keyLast {
		require.NoError(t, mw.WriteField("key", alice.Key))
	}
	require.NoError(t, mw.Close())
	var r io.Reader = &body
	if pace != nil {
		r = pace(r)
	}
	req, err := http.NewRequest(http.MethodPost, b.url+"/in.php", r)
	require.NoError(t, err)
	req.ContentLength = int64(body.Len())
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(out)
}

// Stalled uploads from as many IPv6 /64s as it takes to hold every turn
// to read a body before its key is known if each /64 had only its own
// share (8 networks, 2 turns each, all within one /48, which one
// subscriber is commonly given) hold only that /48's share
// (Admission.UnauthenticatedPerNetwork): a caller at another address that
// sends its key in the body, as 2captcha-python's in.php does, and one
// that uploads its image as 2captcha's SDKs do (multipart, over TCP), are
// served at once.
func TestStalledUploadsFromManyNetworksHoldEveryTurn(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) { c.Admission = gateway.Admission{UnauthenticatedWait: 2 * time.Second} }, streamtest.WithWorkers(0))
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	nets := gateway.DefaultUnauthenticated / gateway.DefaultUnauthenticatedPerAddress
	var bodies []*firstRead
	for n := range nets {
		for range gateway.DefaultUnauthenticatedPerAddress {
			body, _ := b.stallFrom(t, &wg, fmt.Sprintf("[2001:db8:7:%x::1]:40000", n))
			bodies = append(bodies, body)
		}
	}
	held := heldWithin(bodies, 5*time.Second)
	t.Logf("stalled uploads from %d /64s of one /48 being read: %d", nets, held)
	require.Equal(t, gateway.DefaultUnauthenticatedPerNetwork, held, "bodies read at once from one /48 before their key is known")

	start := time.Now()
	answer := b.keyInBodyInPHP()
	t.Logf("the key-in-body caller answered %q after %s", answer, time.Since(start).Round(time.Millisecond))
	require.True(t, strings.HasPrefix(answer, "OK|"), "another address's caller with its key in the body: %s", answer)
	start = time.Now()
	code, answer := b.multipartInPHP(t, noisePNG(t, 140), true, nil)
	t.Logf("a multipart upload with its key last answered %d %q after %s", code, answer, time.Since(start).Round(time.Millisecond))
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(answer, "OK|"), "a multipart upload with its key in the body: %s", answer)
	require.Less(t, time.Since(start), time.Second, "served without waiting for a turn")
}

// Stalled uploads from as many networks as there are turns an address
// that never proved a key may take (12 IPv4 /24s, each within its shares)
// hold all of those, but each only for
// Admission.UnauthenticatedGrace plus what it sent at
// UnauthenticatedMinRate: then its turn goes to the caller waiting (with
// its key in the body), which is served within its wait, and the stalled
// upload is answered 408 without waiting for the rest of its body.
func TestStalledUploadsFromManyNetworksGiveTheirTurnsBack(t *testing.T) {
	t.Parallel()
	const grace = time.Second
	b := setup(t, func(c *gateway.Config) {
		c.Admission = gateway.Admission{UnauthenticatedWait: 5 * time.Second, UnauthenticatedGrace: grace}
	}, streamtest.WithWorkers(0))
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	var (
		bodies   []*firstRead
		answered []<-chan *httptest.ResponseRecorder
	)
	for n := range gateway.DefaultUnauthenticated - gateway.DefaultUnauthenticatedReserved {
		body, ans := b.stallFrom(t, &wg, fmt.Sprintf("192.0.%d.1:40000", n))
		bodies, answered = append(bodies, body), append(answered, ans)
	}
	start := time.Now()
	require.Equal(t, gateway.DefaultUnauthenticated-gateway.DefaultUnauthenticatedReserved, heldWithin(bodies, 5*time.Second),
		"every turn held but the reserve of addresses that proved a key")

	answer := b.keyInBodyInPHP()
	waited := time.Since(start)
	t.Logf("the key-in-body caller answered %q after %s", answer, waited.Round(time.Millisecond))
	require.True(t, strings.HasPrefix(answer, "OK|"), "a caller waiting for a turn the stalled uploads held: %s", answer)
	require.GreaterOrEqual(t, waited, grace, "it waited for a stalled upload's turn")
	for i, ans := range answered {
		select {
		case w := <-ans:
			require.Equal(t, http.StatusRequestTimeout, w.Code, "stalled upload %d: %s", i, w.Body)
		case <-time.After(5 * time.Second):
			t.Fatalf("stalled upload %d still read after %s", i, time.Since(start))
		}
	}
	t.Logf("all %d stalled uploads answered 408 within %s", len(answered), time.Since(start).Round(time.Millisecond))
}

// A caller on a poor link (2 KB/s) uploading a 100 KB image, its key
// after the image (so read entirely on a turn before its key is known),
// keeps the pace a body must keep before its key is known with room to
// spare, and is served: the default admission, a real upload over TCP.
func TestSlowUploadOnAPoorLinkIsServed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	start := time.Now()
	code, answer := b.multipartInPHP(t, noisePNG(t, 320), true, func(r io.Reader) io.Reader {
		return &throttled{r: r, chunk: 200, every: 100 * time.Millisecond}
	})
	t.Logf("100 KB at 2 KB/s answered %d %q after %s", code, answer, time.Since(start).Round(time.Millisecond))
	require.Equal(t, http.StatusOK, code, answer)
	require.True(t, strings.HasPrefix(answer, "OK|"), answer)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := b.env.Client.TaskOf(ctx, "alice-"+strings.TrimPrefix(answer, "OK|"))
	require.NoError(t, err, "the task is in the stream")
	require.Zero(t, b.env.Emulator.Stats().Submitted, "no worker: nothing paid")
}

// throttled gives chunk bytes of r every interval: a link's pace.
type throttled struct {
	r     io.Reader
	chunk int
	every time.Duration
	next  time.Time
}

func (s *throttled) Read(p []byte) (int, error) {
	if wait := time.Until(s.next); wait > 0 {
		time.Sleep(wait) // the link's pace, not a wait for an event
	}
	s.next = time.Now().Add(s.every)
	return s.r.Read(p[:min(len(p), s.chunk)])
}

// Stalled uploads from as many networks as there are turns hold every turn
// but the reserve (Admission.UnauthenticatedReserved): a caller whose
// address proved a key before (here a getbalance with the key in the
// query, as every res.php poll carries it) takes one of those at once, its
// key in the body, long before the stalled uploads' grace ends.
func TestProvenCallerTakesAReservedTurnDuringTheStall(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) { c.Admission = gateway.Admission{UnauthenticatedWait: 5 * time.Second} }, streamtest.WithWorkers(0))
	b.proveKeyInBodyAddress(t)

	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	var bodies []*firstRead
	for n := range 2 * gateway.DefaultUnauthenticated {
		body, _ := b.stallFrom(t, &wg, fmt.Sprintf("192.0.%d.1:40000", n))
		bodies = append(bodies, body)
	}
	require.Equal(t, gateway.DefaultUnauthenticated-gateway.DefaultUnauthenticatedReserved, heldWithin(bodies, 3*time.Second),
		"every turn held but the reserve")
	b.servedFromTheReserve(t)
}

// Over a real connection, an upload behind the pace is answered 408 once
// its grace ends, through the connection's read deadline, and its turn is
// free again: the same caller's next upload is served.
func TestStalledUploadOverTCPAnswered408(t *testing.T) {
	t.Parallel()
	const grace = 500 * time.Millisecond
	b := setup(t, func(c *gateway.Config) { c.Admission = gateway.Admission{UnauthenticatedGrace: grace} }, streamtest.WithWorkers(0))
	u, err := url.Parse(b.url)
	require.NoError(t, err)
	c, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	_, err = fmt.Fprintf(c, "POST /in.php HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n\r\nmethod=base64&body=AAAA", u.Host)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	resp.Body.Close()
	t.Logf("a stalled upload answered %d after %s", resp.StatusCode, time.Since(start).Round(time.Millisecond))
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	require.GreaterOrEqual(t, time.Since(start), grace)

	code, answer := b.multipartInPHP(t, noisePNG(t, 140), true, nil)
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(answer, "OK|"), answer)

	// The JSON dialect's createTask the same.
	c2, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer c2.Close()
	start = time.Now()
	_, err = fmt.Fprintf(c2, "POST /createTask HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"task\":{\"type\":\"ImageToTextTask\",\"body\":\"AAAA", u.Host)
	require.NoError(t, err)
	resp, err = http.ReadResponse(bufio.NewReader(c2), nil)
	require.NoError(t, err)
	resp.Body.Close()
	t.Logf("a stalled createTask answered %d after %s", resp.StatusCode, time.Since(start).Round(time.Millisecond))
	require.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
}

// A real client that sends its key in the body, the Python script written
// as Anti-Captcha's and CapMonster's docs write their calls (createTask,
// then getTaskResult until ready, clientKey in each JSON body), gets its
// token while stalled uploads hold every turn others may take: 8 /64s of
// one /48 (that network's 4) and 12 IPv4 /24s (the rest). Its address
// polled before (a getbalance with the key in the query), so its calls
// take the reserve; each is paid once.
func TestPythonKeyInBodyClientDuringTheStall(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	require.Equal(t, "100", b.call(t, "res.php", "key", alice.Key, "action", "getbalance"))
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	var bodies []*firstRead
	for n := range 8 {
		for range gateway.DefaultUnauthenticatedPerAddress {
			body, _ := b.stallFrom(t, &wg, fmt.Sprintf("[2001:db8:7:%x::1]:40000", n))
			bodies = append(bodies, body)
		}
	}
	for n := range gateway.DefaultUnauthenticated - gateway.DefaultUnauthenticatedReserved - gateway.DefaultUnauthenticatedPerNetwork {
		body, _ := b.stallFrom(t, &wg, fmt.Sprintf("192.0.%d.1:40000", n))
		bodies = append(bodies, body)
	}
	require.Equal(t, gateway.DefaultUnauthenticated-gateway.DefaultUnauthenticatedReserved, heldWithin(bodies, 3*time.Second),
		"every turn held but the reserve")
	start := time.Now()
	line, code := b.runPython(t, "createtask.py", alice)
	took := time.Since(start)
	t.Logf("createtask.py: exit %d after %s", code, took.Round(time.Millisecond))
	require.Equal(t, 0, code, line)
	require.Less(t, took, 5*time.Second, "served from the reserve, not once the stalled uploads' grace (10 s) ends")
	id, token, ok := strings.Cut(line, " ")
	require.True(t, ok, line)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := b.env.Client.Wait(ctx, "alice-"+id)
	require.NoError(t, err)
	require.Equal(t, out.Text(), token)
	require.Equal(t, 1, b.env.Emulator.Stats().Submitted, "paid once")
}
