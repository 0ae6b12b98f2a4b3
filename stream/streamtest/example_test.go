package streamtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// payOrder is your code: it gets a captcha token for an order's payment
// page, solving once more when the token expired before it could be used.
func payOrder(ctx context.Context, c *stream.Client, orderID string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	task := stream.Task{ID: orderID, Method: "turnstile", Priority: "high",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/pay/" + orderID}}
	for try := 1; ; try++ {
		out, err := c.Solve(ctx, task)
		switch {
		case errors.Is(err, stream.ErrTokenExpired) && try < 2:
			task.ID = fmt.Sprintf("%s-%d", orderID, try+1) // a new task: the old id is its audit trail
			continue
		case errors.Is(err, stream.ErrNotSolved):
			return "", fmt.Errorf("order %s: %w (%s)", orderID, errCaptchaFailed, out.Reason)
		case err != nil:
			return "", fmt.Errorf("order %s: %w", orderID, err)
		}
		return out.Text(), nil
	}
}

var errCaptchaFailed = errors.New("captcha failed")

// These are the tests of payOrder, as they read in your module (named
// TestPayOrder…; here TestExamples runs them). Each starts a whole captchaq
// in-process; the three of them take a fraction of a second.

func testPayOrder(t *testing.T) {
	env := streamtest.Start(t)
	token, err := payOrder(t.Context(), env.Client, "order-1")
	require.NoError(t, err)
	require.NotEmpty(t, token)
}

func testPayOrderCaptchaFails(t *testing.T) {
	env := streamtest.Start(t, streamtest.WithFaults(fakeapi.Faults{Unsolvable: 1}), streamtest.WithMaxAttempts(2))

	_, err := payOrder(t.Context(), env.Client, "order-2")
	require.ErrorIs(t, err, errCaptchaFailed)
	require.ErrorContains(t, err, "attempts-exhausted")

	dead, err := env.Client.DeadLetters(t.Context(), stream.DeadFilter{})
	require.NoError(t, err)
	require.Len(t, dead, 1, "operators find the order in the dead letter")
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", dead[0].Error)
}

func testPayOrderTokenExpires(t *testing.T) {
	env := streamtest.Start(t, streamtest.WithTokenLifetime(time.Nanosecond))

	_, err := payOrder(t.Context(), env.Client, "order-3")
	require.ErrorIs(t, err, stream.ErrTokenExpired)
	require.Equal(t, 2, env.Emulator.Stats().Solved, "payOrder solves once more, then gives up")
}

// Testing your own code against a whole captchaq: the functions above are
// tests of payOrder as you would write them in your module, each starting
// its Env with streamtest.Start(t, options…). Copy the file, rename
// testPayOrder… to TestPayOrder…, and run go test.
func Example() {}
