package solver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/solver"
)

// keyPieces returns every 6-byte substring of key and of its URL-encoded
// forms: none of them may appear in an error.
func keyPieces(key string) []string {
	var out []string
	for _, f := range []string{key, url.QueryEscape(key), url.PathEscape(key)} {
		for i := 0; i+6 <= len(f); i++ {
			out = append(out, f[i:i+6])
		}
	}
	return out
}

// echoServer answers every request with a reply built around the request
// it got: the form body as sent (URL-encoded), or its values decoded ("raw"),
// after the number of padding bytes given by the first path element
// (/17/res.php pads 17 bytes), so that truncation can cut the key anywhere.
func echoServer(t *testing.T, echo, shape string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pad, _ := strconv.Atoi(strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")[0])
		body, _ := io.ReadAll(r.Body)
		text := string(body)
		if echo == "raw" {
			v, _ := url.ParseQuery(text)
			text = "action=" + v.Get("action") + "&json=1&key=" + v.Get("key") + "&id=" + v.Get("id")
		}
		text = strings.Repeat("x", pad) + text
		js, _ := json.Marshal(text)
		switch shape {
		case "500":
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, text)
		case "html500":
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "<html><title>"+text+"</title><body>"+text+"</body></html>")
		case "garbage":
			io.WriteString(w, text)
		case "ok":
			io.WriteString(w, "OK|"+text)
		case "json":
			fmt.Fprintf(w, `{"status":1,"request":%s}`, js)
		case "jsonstatus":
			fmt.Fprintf(w, `{"status":%s,"request":"x"}`, js)
		case "badjson":
			fmt.Fprintf(w, `{"status":1,"request":%s`, js)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestErrorsNeverQuotePartOfKey is the regression test for a key cut at the
// 80-byte quote of a bad reply (or the 64-byte quote of a bad balance, id or
// report answer): with every padding from 0 to 100 bytes, every reply shape
// and the key echoed URL-encoded and decoded, no 6-byte piece of the key is
// in any error of Balance, Report or Submit.
func TestErrorsNeverQuotePartOfKey(t *testing.T) {
	t.Parallel()
	keys := []string{
		"0123456789abcdef0123456789abcdef",
		"0123456789+abc/def=0123456789&ab%cd<ef>",
	}
	for ki, key := range keys {
		for _, echo := range []string{"form", "raw"} {
			for _, shape := range []string{"500", "html500", "garbage", "ok", "json", "jsonstatus", "badjson"} {
				t.Run(fmt.Sprintf("key%d/%s/%s", ki, echo, shape), func(t *testing.T) {
					t.Parallel()
					srv := echoServer(t, echo, shape)
					pieces := keyPieces(key)
					for pad := 0; pad <= 100; pad++ {
						c, err := solver.NewClient(solver.Config{BaseURL: srv.URL + "/" + strconv.Itoa(pad),
							APIKey: key, MinSubmitInterval: -1, SubmitBurst: -1})
						if err != nil {
							t.Fatal(err)
						}
						ctx := context.Background()
						_, errB := c.Balance(ctx)
						errR := c.Report(ctx, "12345", true)
						_, errS := c.Submit(ctx, turnstile("https://a.example/"))
						for op, err := range map[string]error{"Balance": errB, "Report": errR, "Submit": errS} {
							if err == nil {
								continue // a short echo can pass for a captcha id
							}
							msg := err.Error()
							for _, p := range pieces {
								if strings.Contains(msg, p) {
									t.Fatalf("pad %d: %s error quotes %q of the key: %s", pad, op, p, msg)
								}
							}
						}
					}
				})
			}
		}
	}
}
