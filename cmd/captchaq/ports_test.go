package main

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// A port the tests hand to a process they start (a node's route port, a
// server's --listen) is free when chosen and bound later by the process:
// chosen by the kernel (127.0.0.1:0), it is an ephemeral port, the range
// every port-0 listener of the tests running beside it (httptest, the
// embedded brokers) and the local end of every outgoing connection draw
// from, and one of them may take it in between. CI's race preview lost
// TestClusterWalkthroughRunsAsWritten so: node 3's route port, freed, was
// held by an HTTP server when the node bound it ("bind: address already
// in use"; the other nodes' routes got "400 Bad Request"). So the tests
// choose below the ephemeral range, where nothing is bound unless asked
// for by number, and never hand one port out twice.
var handedPorts = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// unusedPort returns a port of 127.0.0.1 that is free now, below the
// kernel's ephemeral range, not handed out before by this test binary.
func unusedPort(t *testing.T) int {
	t.Helper()
	low := ephemeralLow()
	handedPorts.Lock()
	defer handedPorts.Unlock()
	for range 1000 {
		p := low - 12000 + rand.IntN(12000)
		if handedPorts.m[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // held by something else
		}
		require.NoError(t, l.Close())
		handedPorts.m[p] = true
		return p
	}
	t.Fatalf("no free port of 127.0.0.1 in %d-%d after 1000 tries", low-12000, low-1)
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range), 32768 where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 13024 {
		return 32768
	}
	return n
}
