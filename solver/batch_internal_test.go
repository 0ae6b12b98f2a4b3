package solver

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/retry"
)

func TestParseBatch(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	tests := []struct {
		name     string
		status   int
		body     string
		want     []string
		notBatch bool
		class    retry.Class // of the error, when want is nil
	}{
		{"plain", 200, "03Atok|ERROR_CAPTCHA_UNSOLVABLE", []string{"03Atok", "ERROR_CAPTCHA_UNSOLVABLE"}, false, 0},
		{"json status 1", 200, `{"status":1,"request":"abc|CAPCHA_NOT_READY"}`, []string{"abc", "CAPCHA_NOT_READY"}, false, 0},
		{"json status 0", 200, `{"status":0,"request":"CAPCHA_NOT_READY|CAPCHA_NOT_READY"}`, []string{"CAPCHA_NOT_READY", "CAPCHA_NOT_READY"}, false, 0},
		{"ids ignored", 200, "ERROR_WRONG_CAPTCHA_ID", nil, true, retry.Transient},
		{"one answer", 200, `{"status":1,"request":"03Atok"}`, nil, true, retry.Transient},
		{"answer with a pipe", 200, "a|b|c", nil, true, retry.Transient},
		{"empty state", 200, "a|", nil, true, retry.Transient},
		{"key revoked", 200, "ERROR_WRONG_USER_KEY", nil, false, retry.Fatal},
		{"server error", 500, "<html><title>500</title></html>", nil, false, retry.Transient},
		{"html page", 200, "<html><title>Just a moment | Cloudflare</title></html>", nil, false, retry.Transient},
		{"echoes the key", 200, "x|" + key + "|y", nil, true, retry.Transient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, notBatch, err := parseBatch(tt.status, []byte(tt.body), 2, key)
			if tt.want != nil {
				if err != nil || !slices.Equal(got, tt.want) {
					t.Fatalf("parseBatch = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Class != tt.class || notBatch != tt.notBatch {
				t.Fatalf("parseBatch = %q, notBatch %v, %v; want a %s error, notBatch %v", got, notBatch, err, tt.class, tt.notBatch)
			}
			if strings.Contains(err.Error(), key[:8]) || strings.Contains(err.Error(), "03Atok") {
				t.Errorf("error quotes the key or a token: %v", err)
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
		states, notBatch, err := parseBatch(status, body, n, key)
		switch {
		case err == nil && (len(states) != n || notBatch):
			t.Fatalf("states %q, notBatch %v for n %d", states, notBatch, n)
		case err != nil && strings.Contains(err.Error(), key):
			t.Fatalf("error quotes the key: %v", err)
		}
	})
}
