package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// A caller that proved its key is served from the reserve at once even
// while its neighbours in its own IPv4 /24 (other tenants of a hosting
// provider's block, which anyone can rent a server in) stall uploads on
// every turn that network may hold: the network's share does not stand
// between a proven caller and the reserve kept for it.
func TestProvenCallerServedWhileItsOwnNetworkStalls(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *gateway.Config) { c.Admission = gateway.Admission{UnauthenticatedWait: 3 * time.Second} }, streamtest.WithWorkers(0))
	b.proveKeyInBodyAddress(t)

	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	var bodies []*firstRead
	for host := 8; host < 10; host++ {
		for range gateway.DefaultUnauthenticatedPerAddress {
			body, _ := b.stallFrom(t, &wg, fmt.Sprintf("198.51.100.%d:40000", host))
			bodies = append(bodies, body)
		}
	}
	require.Equal(t, gateway.DefaultUnauthenticatedPerNetwork, heldWithin(bodies, 3*time.Second), "the /24's turns held by its neighbours")
	b.servedFromTheReserve(t)
}

// proveKeyInBodyAddress has keyInBodyInPHP's address prove alice's key (a
// getbalance with the key in the query).
func (b *bundle) proveKeyInBodyAddress(t *testing.T) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/res.php?action=getbalance&key="+alice.Key, nil)
	r.RemoteAddr = "198.51.100.7:50000" // keyInBodyInPHP's address
	w := httptest.NewRecorder()
	b.gw.ServeHTTP(w, r)
	require.Equal(t, "100", w.Body.String())
}

// servedFromTheReserve requires keyInBodyInPHP, from the address that
// proved its key, to be served within a second: from the reserve, not
// after the stalled uploads' grace (10 s).
func (b *bundle) servedFromTheReserve(t *testing.T) {
	t.Helper()
	start := time.Now()
	answer := b.keyInBodyInPHP()
	t.Logf("the proven caller answered %q after %s", answer, time.Since(start).Round(time.Millisecond))
	require.True(t, strings.HasPrefix(answer, "OK|"), answer)
	require.Less(t, time.Since(start), time.Second, "served from the reserve, not after the stalled uploads' grace")
}
