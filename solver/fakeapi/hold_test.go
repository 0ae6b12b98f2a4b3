package fakeapi

import (
	"testing"
	"time"
)

// A held captcha is not ready past its solve time and holds its thread;
// at the release it is ready at once, and one accepted after the release
// at its own time.
func TestHoldKeepsCaptchasSolvingUntilReleased(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	s := New(Config{Threads: 3, NumericIDs: true, SolveTime: map[string]Range{KindTurnstile: {Min: 10 * time.Second, Max: 10 * time.Second}}})
	s.now = func() time.Time { return now }
	turnstile := []string{"method", "turnstile", "sitekey", "x", "pageurl", "https://a.example/"}
	res := func(id string) string {
		_, body := do(t, s, get("/res.php", vals("key", TestKey, "action", "get", "id", id)))
		return body
	}
	before := submit(t, s, turnstile...) // solving when the hold starts
	release := s.Hold()
	during := submit(t, s, turnstile...)
	now = now.Add(time.Hour)
	for _, id := range []string{before, during} {
		if body := res(id); body != "CAPCHA_NOT_READY" {
			t.Fatalf("held %s an hour past its solve time: %q", id, body)
		}
	}
	if st := s.Stats(); st.Concurrent != 2 || st.MaxConcurrent != 2 {
		t.Fatalf("held: concurrent %d max %d, want 2 2", st.Concurrent, st.MaxConcurrent)
	}
	release()
	release() // a second call changes nothing
	for _, id := range []string{before, during} {
		if body := res(id); body == "CAPCHA_NOT_READY" {
			t.Fatalf("released %s: %q", id, body)
		}
	}
	after := submit(t, s, turnstile...)
	if body := res(after); body != "CAPCHA_NOT_READY" {
		t.Fatalf("accepted after the release, before its solve time: %q", body)
	}
	if st := s.Stats(); st.Concurrent != 1 {
		t.Fatalf("released: concurrent %d, want 1", st.Concurrent)
	}
}
