// Serving in.php and res.php: the request's route, the refusals the gateway
// answers without reading a body, and the caller-facing task ids.

package gateway

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/big"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
)

// ServeHTTP serves /in.php and /res.php, GET and POST, and the JSON
// dialect's calls (createtask.IsPath), POST; anything else is 404.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	served, jsonOp, allow := createtask.Route(op, r.Method)
	if !served {
		http.NotFound(w, r)
		return
	}
	if r.Method == http.MethodOptions {
		// A browser's preflight of a JSON POST (the JavaScript SDK posts
		// images so): allowed from anywhere, as header_acao=1 allows
		// the request itself; the key still decides everything.
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Allow-Methods", "GET, POST")
		w.Header().Set("Access-Control-Allow-Headers", "Content-Type")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if allow != "" {
		w.Header().Set("Allow", allow)
		msg := "method not allowed"
		if jsonOp {
			msg += ": the JSON dialect's calls are POSTs of a JSON object"
		}
		http.Error(w, msg, http.StatusMethodNotAllowed)
		return
	}
	now, addr := g.cfg.Now(), clientAddr(r)
	if jsonOp {
		// The preflight above allowed the call from anywhere: every reply
		// says so too, or a browser withholds it from the page.
		w.Header().Set("Access-Control-Allow-Origin", "*")
		g.serveJSON(w, r, op, addr, now)
		return
	}
	q := queryForm(r)
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "application/json" && r.Method == http.MethodPost && q["json"] == "" {
		// A caller that posts JSON reads JSON (its json=1 is in the
		// body): so are the answers given before the body is read.
		q["json"] = "1"
	}
	if g.admit.banned(addr, now) {
		g.refuse(w, q, op, classic.CodeIPBanned)
		return
	}
	known, release, refusal := g.admitRequest(w, r, addr, now, q["key"])
	defer release()
	switch refusal {
	case refusedKey:
		unread(w)
		newReplier(w, q).code(classic.CodeKeyDoesNotExist, "no such gateway key")
		return
	case refusedBusy:
		g.refuse(w, q, op, "busy")
		return
	}
	f, err := readForm(w, r, known)
	rep := newReplier(w, f)
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, errUnknownKey):
		unread(w)
		rep.code(classic.CodeKeyDoesNotExist, "no such gateway key")
		return
	case errors.Is(err, errTooSlow):
		tooSlow(w)
		return
	case errors.As(err, &tooBig) && op == classic.SubmitPath:
		// Only an image makes a body this large: the service's code
		// for an image over its size (solver/testdata/service/replies.json,
		// ERROR_TOO_BIG_CAPTCHA_FILESIZE).
		rep.code(classic.CodeTooBigCaptchaFilesize, fmt.Sprintf("the request is over %d bytes: an image is at most %d", tooBig.Limit, captcha.MaxImageSize))
		return
	case err != nil:
		rep.code(classic.CodeBadParameters, err.Error())
		return
	}
	c := g.callers[sha256.Sum256([]byte(f["key"]))]
	if c == nil || f["key"] == "" {
		g.admit.badKey(addr, now)
		// The service's answer to a key it does not know
		// (solver/testdata/service/replies.json, ERROR_KEY_DOES_NOT_EXIST).
		rep.code(classic.CodeKeyDoesNotExist, "no such gateway key")
		return
	}
	if op == classic.SubmitPath {
		g.submit(r.Context(), c, f, remoteHost(r), rep)
		return
	}
	g.result(r.Context(), c, f, rep)
}

// Why admitRequest refuses a request before reading it.
const (
	refusedNone = iota
	refusedKey  // the key in the query is not the gateway's
	refusedBusy // over its address's count, or no turn to read its body
)

// admitRequest bounds what a request from addr may cost before its key is
// known, for both dialects: a request whose key is in its query (queryKey)
// is decided on at once; one whose key is in its body counts against its
// address's requests and waits for a turn to read its body, and leaves
// both once known says its key is the gateway's. It returns known (which
// records an unknown key against addr), release (to defer) and why it
// refused the request, if it did. A known key's requests are bounded by
// the key's own limits instead.
func (g *Gateway) admitRequest(w http.ResponseWriter, r *http.Request, addr string, now time.Time, queryKey string) (known func(string) bool, release func(), refusal int) {
	known = func(key string) bool {
		h := sha256.Sum256([]byte(key))
		if key == "" || g.callers[h] == nil {
			g.admit.badKey(addr, now)
			return false
		}
		g.admit.prove(addr, h, now)
		return true
	}
	var releases []func()
	release = func() {
		for _, f := range releases {
			f()
		}
	}
	switch {
	case queryKey != "" && !known(queryKey):
		return known, release, refusedKey
	case queryKey == "":
		enter, ok := g.admit.enter(addr)
		if !ok {
			return known, release, refusedBusy
		}
		// Once the key in the body is known, the key's limits bound the
		// request, as they bound one with its key in the query: it leaves
		// its address's count then.
		var once sync.Once
		leave := func() { once.Do(enter) }
		releases = append(releases, leave)
		inner := known
		known = func(key string) bool {
			ok := inner(key)
			if ok {
				leave()
			}
			return ok
		}
		if r.Method == http.MethodPost && r.ContentLength != 0 {
			done, ok := g.admit.unauthTurn(r.Context(), addr, g.admit.isProven(addr, now))
			if !ok {
				return known, release, refusedBusy
			}
			done = g.admit.pace(w, r, done)
			releases = append(releases, done)
			inner := known
			known = func(key string) bool {
				ok := inner(key)
				done()
				return ok
			}
		}
	}
	return known, release, refusedNone
}

// remoteHost is the address a request comes from, as getTaskResult's ip
// gives it: the connection's peer (a header anyone may send is not taken).
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// refuse answers a request the gateway does not read: from a banned
// address (IP_BANNED), or over its address's count or the turns to read
// bodies before their key is known (busy), with the service's code for
// too many requests of the operation (in.php MAX_USER_TURN, res.php
// "ERROR: 1005"), which callers wait on and retry.
func (g *Gateway) refuse(w http.ResponseWriter, q form, op, why string) {
	unread(w)
	rep := newReplier(w, q)
	switch {
	case why == classic.CodeIPBanned:
		rep.code(classic.CodeIPBanned, "too many requests with keys the gateway does not know from this address: wait")
	case op == classic.SubmitPath:
		rep.code(classic.CodeMaxUserTurn, "too many requests from this address at once: wait")
	default:
		rep.code(classic.CodeTooManyPolls, "too many requests from this address at once: wait")
	}
}

// unread ends a request whose body the gateway does not read: the
// connection closes with the answer, without waiting for the rest of the
// body (the server would otherwise read up to 256 KB of it, as slowly as
// the caller sends it, to keep the connection).
func unread(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// tooSlow answers a request whose body fell behind the pace a body must
// keep before its key is known (Admission.UnauthenticatedMinRate): HTTP
// 408, as a server answers a request that did not arrive in time, which
// the services' SDKs take for a network error and send again. The
// connection closes.
func tooSlow(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	http.Error(w, "request timeout: the body arrived slower than the gateway reads a body before its key is known", http.StatusRequestTimeout)
}

// newNumber draws a task's caller-facing id: 18 decimal digits, the first
// not 0, so it reads as a number and parses as a 64-bit integer.
func newNumber() string {
	n, _ := rand.Int(rand.Reader, big.NewInt(9e17))
	return n.Add(n, big.NewInt(1e17)).String()
}

// taskID is the captchaq id of a caller's task.
func taskID(producer, num string) string { return producer + "-" + num }
