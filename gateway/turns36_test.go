package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// Stalled uploads from as many IPv6 /64s as it takes to hold every turn
// to read a body before its key is known (8 networks, 2 turns each, all
// within one /48, which one subscriber is commonly given) keep out a
// caller at another address that sends its key in the body, as
// 2captcha-python's in.php does: it waits UnauthenticatedWait and is
// refused MAX_USER_TURN, while the uploads may stall for the gateway's
// whole-request timeout (60 s) and be sent again.
func TestStalledUploadsFromManyNetworksHoldEveryTurn(t *testing.T) {
	if os.Getenv("CAPTCHAQ_KNOWN_HOLES") != "1" {
		t.Skip("known hole: 16 turns in all, 2 per address: 8 client networks stalling uploads keep out every key-in-body caller; CAPTCHAQ_KNOWN_HOLES=1 runs it")
	}
	t.Parallel()
	b := setup(t, func(c *gateway.Config) { c.Admission = gateway.Admission{UnauthenticatedWait: 2 * time.Second} }, streamtest.WithWorkers(0))
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	nets := gateway.DefaultUnauthenticated / gateway.DefaultUnauthenticatedPerAddress
	var bodies []*firstRead
	for n := range nets {
		for range gateway.DefaultUnauthenticatedPerAddress {
			body := stalledBody(t, "method=base64&body=AAAA&").(*firstRead)
			bodies = append(bodies, body)
			r := httptest.NewRequest(http.MethodPost, "/in.php", body)
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.RemoteAddr = fmt.Sprintf("[2001:db8:7:%x::1]:40000", n)
			wg.Add(1)
			go func() { defer wg.Done(); b.gw.ServeHTTP(httptest.NewRecorder(), r) }()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	held := 0
	for _, body := range bodies {
		select {
		case <-body.done:
			held++
		case <-ctx.Done():
		}
	}
	t.Logf("stalled uploads from %d networks being read: %d", nets, held)

	start := time.Now()
	answer := b.keyInBodyInPHP()
	t.Logf("the key-in-body caller answered %q after %s", answer, time.Since(start).Round(time.Millisecond))
	require.True(t, strings.HasPrefix(answer, "OK|"), "another address's caller with its key in the body: %s", answer)
}
