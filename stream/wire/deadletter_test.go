package wire

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/captchaq/captchaq/retry"
)

// TestParseDeadLetter checks that each header of a dead letter lands in
// its own field (no two read from one header), the task's method and page
// host come from the body, and a body that is not JSON is kept as a JSON
// string.
func TestParseDeadLetter(t *testing.T) {
	t.Parallel()
	first := time.Date(2026, 12, 6, 4, 0, 0, 1, time.UTC)
	last := first.Add(90 * time.Second)
	at := last.Add(time.Second)
	h := map[string][]string{
		HeaderReason:      {string(retry.ReasonPermanent)},
		HeaderError:       {"ERROR_CAPTCHA_UNSOLVABLE"},
		HeaderDetail:      {"the service gave up"},
		HeaderSubject:     {"captcha.tasks.slow.normal.t1"},
		HeaderCancelHash:  {"abc"},
		HeaderAttempts:    {"3"},
		HeaderBodyOmitted: {"17"},
		HeaderGen:         {"41"},
		HeaderFirstFail:   {first.Format(time.RFC3339Nano)},
		HeaderLastFail:    {last.Format(time.RFC3339Nano)},
	}
	body := []byte(`{"id":"t1","method":"turnstile","params":{"sitekey":"k","pageurl":"https://shop.example/a?b=c"}}`)
	got := ParseDeadLetter(DeadSubject("t1"), h, body, 9, at)
	want := DeadLetter{Seq: 9, ID: "t1", Method: "turnstile", Host: "shop.example", Reason: retry.ReasonPermanent,
		Error: "ERROR_CAPTCHA_UNSOLVABLE", Detail: "the service gave up", Attempts: 3, Subject: "captcha.tasks.slow.normal.t1",
		Gen: 41, FirstFailure: first, LastFailure: last, DeadAt: at, Task: body, CancelHash: "abc", BodyOmitted: 17}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseDeadLetter =\n %+v\nwant\n %+v", got, want)
	}

	got = ParseDeadLetter(DeadSubject("t2"), nil, []byte("not json"), 10, at)
	var s string
	if err := json.Unmarshal(got.Task, &s); err != nil || s != "not json" {
		t.Errorf("a body that is not JSON: Task = %s (%v), want the JSON string \"not json\"", got.Task, err)
	}
	if got.ID != "t2" || got.Method != "" || got.Attempts != 0 || !got.FirstFailure.IsZero() {
		t.Errorf("a letter without headers: %+v", got)
	}
}
