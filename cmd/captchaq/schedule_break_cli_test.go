package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The operator's side of scheduled tasks: wrong or missing --use-at and
// --not-before values are refused with exit code 2 naming the flag or the
// field; a waiting task shows in `task ls --status scheduled` and `trace`,
// and `task show` says at once that `task cancel` asked it not be solved.
func TestScheduleCLIOperator(t *testing.T) {
	t.Parallel()
	ctx, natsURL, client, api := scheduleCLISetup(t)

	dir := t.TempDir()
	n := 0
	file := func(lines ...string) string {
		n++
		f := filepath.Join(dir, fmt.Sprintf("tasks-%d.jsonl", n))
		require.NoError(t, os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
		return f
	}
	plain := `{"method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/"}}`
	solve := []string{"solve", "--method", "turnstile", "--param", "sitekey=k", "--param", "pageurl=https://a.example/"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "--use-at", "0s", file(plain)}, "use-at"},
		{[]string{"submit", "--not-before", "-5s", file(plain)}, "not-before"},
		{[]string{"submit", "--use-at", "", file(plain)}, "use-at"},
		{[]string{"submit", "--use-at", "9999-12-31T23:59:59Z", file(plain)}, "use_at"},
		{[]string{"submit", "--use-at", "99999999999h", file(plain)}, "use-at"},
		{[]string{"submit", "--not-before", "2m", file(`{"method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/"},"use_at":"1m"}`)}, "not_before"},
		{[]string{"submit", file(`{"method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/"},"use_at":null}`)}, "use_at"},
		{[]string{"submit", file(`{"method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/"},"not_before":{"in":"5s"}}`)}, "not_before"},
		{append(append([]string{}, solve...), "--use-at"), "use-at"},
		{append(append([]string{}, solve...), "--use-at", "1h", "--not-before", "30m", "--timeout", "-1s"), "timeout"},
		{append(append([]string{}, solve...), "--not-before", "1000h"), "not_before"},
	} {
		r := captchaq(t, natsURL, c.args...)
		require.Equal(t, 2, r.code, "%v: %s", c.args, r.stderr)
		require.Contains(t, r.stderr, c.want, "%v", c.args)
	}

	r := captchaq(t, natsURL, "submit", "--not-before", "1h", file(`{"id":"later-1","method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/"}}`))
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool {
		r = captchaq(t, natsURL, "task", "ls", "--status", "scheduled")
		return r.code == 0 && strings.Contains(r.stdout, "later-1")
	}, 20*time.Second, 100*time.Millisecond, "task ls --status scheduled shows the waiting task: %s %s", r.stdout, r.stderr)
	r = captchaq(t, natsURL, "trace", "later-1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "scheduled")
	r = captchaq(t, natsURL, "task", "cancel", "later-1")
	require.Equal(t, 0, r.code, r.stderr)
	// The waiting task ends canceled at once (the cancel has a worker look
	// at it in the waiting room now, not at its next look a ScheduleCheck
	// later): `task show` says it is canceled, then that it ended so.
	r = captchaq(t, natsURL, "task", "show", "later-1", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, `"canceled":true`)
	require.Eventually(t, func() bool {
		r = captchaq(t, natsURL, "task", "show", "later-1", "--json")
		return r.code == 0 && strings.Contains(r.stdout, `"status":"done"`) && strings.Contains(r.stdout, `"last_code":"CANCELED"`)
	}, 10*time.Second, 100*time.Millisecond, "ended canceled within seconds: %s %s", r.stdout, r.stderr)
	_, err := client.TaskOf(ctx, "later-1")
	require.NoError(t, err)
	require.Zero(t, api.Stats().InCalls, "the service never heard of a refused or canceled task")
}
