package solver_test

import (
	"sync"
	"testing"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// OnCall hears of every request with the code the client read from it:
// submits, single and batch polls, and a refused page.
func TestOnCallReportsEveryRequest(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls []solver.Call
	b := setup(t, opts{
		api: fakeapi.Config{Faults: fakeapi.Faults{Rules: []fakeapi.Rule{{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}}}},
		client: solver.Config{OnCall: func(c solver.Call) {
			mu.Lock()
			calls = append(calls, c)
			mu.Unlock()
		}},
	})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := b.client.Solve(ctxT(t), recaptcha("https://a.example/")); err != nil {
				t.Errorf("Solve: %v", err)
			}
		})
	}
	wg.Wait()
	if _, err := b.client.Solve(ctxT(t), recaptcha("https://bad.example/")); solver.CodeOf(err) != "ERROR_PAGEURL" {
		t.Fatalf("bad page: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	for _, c := range calls {
		key := c.Op + " " + c.Code
		if c.Batch {
			key += " batch"
		}
		count[key]++
		if c.Duration <= 0 {
			t.Errorf("call %+v without a duration", c)
		}
		if c.Code == "ERROR_PAGEURL" && c.Class != retry.Permanent {
			t.Errorf("ERROR_PAGEURL class %v", c.Class)
		}
	}
	if count["in.php OK"] != 3 || count["in.php ERROR_PAGEURL"] != 1 {
		t.Errorf("in.php calls %v: want 3 OK and 1 ERROR_PAGEURL", count)
	}
	polls := 0
	for k, n := range count {
		if len(k) > 7 && k[:7] == "res.php" {
			polls += n
		}
	}
	if polls == 0 || polls != int(b.resGet.Load()) {
		t.Errorf("res.php calls reported %d (%v), the emulator saw %d", polls, count, b.resGet.Load())
	}
}
