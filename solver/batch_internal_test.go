package solver

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseBatch(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	tests := []struct {
		name    string
		status  int
		body    string
		want    []string
		verdict batchVerdict
	}{
		{"plain", 200, "03Atok|ERROR_CAPTCHA_UNSOLVABLE", []string{"03Atok", "ERROR_CAPTCHA_UNSOLVABLE"}, batchRead},
		{"json status 1", 200, `{"status":1,"request":"abc|CAPCHA_NOT_READY"}`, []string{"abc", "CAPCHA_NOT_READY"}, batchRead},
		{"json status 0", 200, `{"status":0,"request":"CAPCHA_NOT_READY|CAPCHA_NOT_READY"}`, []string{"CAPCHA_NOT_READY", "CAPCHA_NOT_READY"}, batchRead},
		{"ids ignored", 200, "ERROR_WRONG_CAPTCHA_ID", nil, batchNotRead},
		{"ids ignored, not ready", 200, `{"status":0,"request":"CAPCHA_NOT_READY"}`, nil, batchNotRead},
		{"one answer", 200, `{"status":1,"request":"03Atok"}`, nil, batchNotRead},
		{"one answer, plain", 200, "OK|03Atok", nil, batchNotRead},
		{"one answer in capitals", 200, "DZNEU", nil, batchFailed},
		{"answer with a pipe", 200, "a|b|c", nil, batchNotRead},
		{"empty state", 200, "a|", nil, batchNotRead},
		{"request not a string", 200, `{"status":1,"request":{"1":"03Atok|x","2":"y"}}`, nil, batchNotRead},
		{"request an array", 200, `{"status":1,"request":["03Atok","CAPCHA_NOT_READY"]}`, nil, batchNotRead},
		{"truncated JSON", 200, `{"status":1,"request":"03Atok|CAPCHA_NOT_READY`, nil, batchFailed},
		{"busy", 200, "ERROR_TOO_MUCH_REQUESTS", nil, batchFailed},
		{"no slot", 200, `{"status":0,"request":"ERROR_NO_SLOT_AVAILABLE"}`, nil, batchFailed},
		{"key revoked", 200, "ERROR_WRONG_USER_KEY", nil, batchFatal},
		{"gateway refuses ids", 404, "<html><title>404</title></html>", nil, batchNotRead},
		{"server error", 500, "<html><title>500</title></html>", nil, batchFailed},
		{"html page", 200, "<html><title>Just a moment | Cloudflare</title></html>", nil, batchFailed},
		{"echoes the key", 200, "x|" + key + "|y", nil, batchNotRead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, verdict, err := parseBatch(tt.status, []byte(tt.body), 2, key)
			if verdict != tt.verdict {
				t.Fatalf("parseBatch = %q, verdict %d, %v; want verdict %d", got, verdict, err, tt.verdict)
			}
			if tt.want != nil {
				if err != nil || !slices.Equal(got, tt.want) {
					t.Fatalf("parseBatch = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("parseBatch error %v is not a *Error", err)
			}
			if msg := err.Error(); strings.Contains(msg, key[:8]) || strings.Contains(msg, "03Atok") || strings.Contains(msg, "DZNEU") {
				t.Errorf("error quotes the key or an answer: %v", err)
			}
		})
	}
}

func TestParseBatchThree(t *testing.T) {
	got, _, err := parseBatch(http.StatusOK, []byte("03Atok|CAPCHA_NOT_READY|ERROR_CAPTCHA_UNSOLVABLE"), 3, "")
	if err != nil || len(got) != 3 || got[2] != "ERROR_CAPTCHA_UNSOLVABLE" {
		t.Fatalf("parseBatch = %q, %v", got, err)
	}
}

// FuzzParseBatch: parseBatch never panics, returns n states or an error, and
// no error quotes the key.
//
//	go test -fuzz FuzzParseBatch ./solver/
func FuzzParseBatch(f *testing.F) {
	const key = "0123456789abcdef0123456789abcdef"
	for _, s := range []string{"a|CAPCHA_NOT_READY", `{"status":1,"request":"a|b"}`, `{"status":0,"request":"ERROR_WRONG_USER_KEY"}`,
		"<html>|</html>", "x|" + key, "ERROR_WRONG_CAPTCHA_ID", "", "|"} {
		f.Add(200, []byte(s), 2)
		f.Add(500, []byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, status int, body []byte, n int) {
		if n < 2 || n > 100 {
			return
		}
		states, verdict, err := parseBatch(status, body, n, key)
		switch {
		case (err == nil) != (verdict == batchRead) || err == nil && len(states) != n:
			t.Fatalf("states %q, verdict %d, error %v for n %d", states, verdict, err, n)
		case err != nil && strings.Contains(err.Error(), key):
			t.Fatalf("error quotes the key: %v", err)
		}
	})
}

// TestBatchFatalReplyTellsLateCaptchas: a captcha that registers while a
// batch call is in flight is not asked about in it, yet a reply refusing the
// key is about it too. Told nothing, it would be alone after the others
// ended and only make its own polls, far apart late in its schedule.
func TestBatchFatalReplyTellsLateCaptchas(t *testing.T) {
	asked, release := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/res.php" || r.FormValue("ids") == "" {
			http.Error(w, "only batch polls here", http.StatusTeapot)
			return
		}
		asked <- struct{}{}
		<-release
		w.Write([]byte(`{"status":0,"request":"ERROR_KEY_DOES_NOT_EXIST"}`))
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(Config{BaseURL: srv.URL, APIKey: "0123456789abcdef0123456789abcdef", Timing: Timing{Scale: 0.001},
		MinSubmitInterval: -1, SubmitBurst: -1})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	b := c.batch
	first, second := b.add("1", KindRecaptcha), b.add("2", KindRecaptcha)
	t.Cleanup(func() { b.remove(first); b.remove(second) })
	b.earn()
	<-asked // the call about 1 and 2 is in flight
	late := b.add("3", KindRecaptcha)
	t.Cleanup(func() { b.remove(late) })
	close(release)
	for _, w := range []*pollWaiter{first, second, late} {
		select {
		case <-w.signal:
		case <-time.After(5 * time.Second):
			t.Fatalf("captcha %s: told nothing 5 s after the batch reply refused the key", w.id)
		}
		if news := w.take(); len(news) != 1 || news[0].kind != newsFatal || CodeOf(news[0].err) != "ERROR_KEY_DOES_NOT_EXIST" {
			t.Errorf("captcha %s told %+v, want one ERROR_KEY_DOES_NOT_EXIST (fatal)", w.id, news)
		}
	}
}
