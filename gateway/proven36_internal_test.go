package gateway

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// One key proving addresses without end (a caller with a key and an IPv6
// /48 has 65,536 /64s to send it from) does not fill the addresses the
// gateway remembers as proven: another key's caller, new to the gateway,
// is still remembered and takes the reserve.
func TestOneKeyCannotFillTheProvenAddresses(t *testing.T) {
	t.Parallel()
	a := newAdmission(Admission{}.withDefaults())
	now := time.Now()
	alice, bob := sha256.Sum256([]byte("alice's key")), sha256.Sum256([]byte("bob's key"))
	for i := range maxProven {
		a.prove(fmt.Sprintf("2001:db8:%x:%x::/64", i>>16, i&0xffff), alice, now)
	}
	require.True(t, a.isProven("2001:db8:0:1::/64", now), "the key's first addresses")
	a.prove("198.51.100.7", bob, now)
	require.True(t, a.isProven("198.51.100.7", now), "another key's caller proved after one key's flood of addresses")
	// An address proved again keeps its place; the sweep forgets the
	// stale ones and the key's count with them.
	a.prove("2001:db8:0:1::/64", alice, now.Add(time.Minute))
	a.sweep(now.Add(a.cfg.ProvenFor))
	require.True(t, a.isProven("2001:db8:0:1::/64", now.Add(a.cfg.ProvenFor)))
	require.Equal(t, map[[32]byte]int{alice: 1}, a.provenOf)
}
