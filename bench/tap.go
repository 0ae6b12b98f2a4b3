package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"
)

// tap watches the emulator's traffic: when each captcha was accepted by
// in.php, when res.php first returned its answer, and what res.php calls it
// cost: a single poll costs its captcha one call, a batch poll
// (action=get&ids=…) costs each captcha it asks about an equal share. It
// needs no change to the emulator.
type tap struct {
	next http.Handler
	mu   sync.Mutex
	in   map[string]time.Time
	pick map[string]time.Time
	res  map[string]float64
	n    map[string]int // res.php calls that asked about the captcha
	nr   map[string]int // single res.php calls that answered CAPCHA_NOT_READY
	// refusedRun is the current run of in.php calls refused for capacity in
	// a row (every worker's), refusedMax the longest.
	refusedRun, refusedMax int
	// open counts the captchas accepted whose answer res.php has not
	// returned yet: solving, or ready and not picked up.
	open int
	// asked holds when res.php was asked about each captcha, by id.
	asked map[string][]time.Time
	// method is the in.php method of each captcha accepted, by id.
	method map[string]string
}

func newTap(next http.Handler) *tap {
	return &tap{next: next, in: map[string]time.Time{}, pick: map[string]time.Time{}, res: map[string]float64{}, n: map[string]int{}, nr: map[string]int{},
		asked: map[string][]time.Time{}, method: map[string]string{}}
}

type recorder struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.buf.Write(b)
	return r.ResponseWriter.Write(b)
}

func (t *tap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ids []string
	if r.URL.Path == "/in.php" {
		_ = r.ParseForm() // a multipart body stays unread: its method is ""
	}
	method := r.Form.Get("method")
	if r.URL.Path == "/res.php" {
		_ = r.ParseForm() // the emulator's own ParseForm then finds it done
		if r.Form.Get("action") == "get" {
			if id := r.Form.Get("id"); id != "" {
				ids = []string{id}
			} else if s := r.Form.Get("ids"); s != "" {
				ids = strings.Split(s, ",")
			}
		}
	}
	rec := &recorder{ResponseWriter: w}
	t.next.ServeHTTP(rec, r)
	now := time.Now()
	var reply struct {
		Status  int             `json:"status"`
		Request json.RawMessage `json:"request"`
	}
	ok := json.Unmarshal(rec.buf.Bytes(), &reply) == nil
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.URL.Path == "/in.php" {
		switch {
		case ok && reply.Status == 1:
			id := string(bytes.Trim(reply.Request, `"`))
			t.in[id] = now
			t.method[id] = method
			t.open++
			t.refusedRun = 0
		case ok && (string(reply.Request) == `"ERROR_ZERO_BALANCE"` || string(reply.Request) == `"ERROR_NO_SLOT_AVAILABLE"`):
			t.refusedRun++
			t.refusedMax = max(t.refusedMax, t.refusedRun)
		}
		return
	}
	states := make([]string, len(ids))
	if ok && reply.Status == 0 && len(ids) == 1 && string(reply.Request) == `"CAPCHA_NOT_READY"` {
		t.nr[ids[0]]++
	}
	if ok && reply.Status == 1 {
		switch len(ids) {
		case 1:
			states[0] = "answer"
		default:
			var list string
			if json.Unmarshal(reply.Request, &list) == nil {
				if s := strings.Split(list, "|"); len(s) == len(ids) {
					states = s
				}
			}
		}
	}
	for i, id := range ids {
		t.res[id] += 1 / float64(len(ids))
		t.n[id]++
		t.asked[id] = append(t.asked[id], now)
		if st := states[i]; st != "" && st != "CAPCHA_NOT_READY" && !strings.HasPrefix(st, "ERROR") {
			if _, seen := t.pick[id]; !seen {
				t.pick[id] = now
				t.open--
			}
		}
	}
}

// opened returns how many captchas are accepted and not answered by res.php
// yet.
func (t *tap) opened() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open
}
