package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clusterPage prepares docs/cluster.md's walkthrough: a directory holding
// captchaq, testdata/tasks.jsonl, the shipped nats.conf and the three
// nodes' configs with their client ports (4222-4224) and route ports
// (6222-6224) moved to those given, and the page's script with the client
// URLs moved alike.
func clusterPage(t *testing.T, clients, routes [3]string) (script, dir string) {
	t.Helper()
	return clusterPageAs(t, clients, routes, false)
}

// clusterPageAs is clusterPage, the script pasted (pastedScript) or not.
func clusterPageAs(t *testing.T, clients, routes [3]string, pasted bool) (script, dir string) {
	t.Helper()
	_, dir = readmeWorkdir(t)
	root := filepath.Join("..", "..")
	page, err := os.ReadFile(filepath.Join(root, "docs", "cluster.md"))
	require.NoError(t, err)
	blocks := shellBlocks(string(page), "sh")
	require.Len(t, blocks, 2, "docs/cluster.md's walkthrough: the nodes, then the worker and the tasks")
	copyFile(t, filepath.Join(root, "nats.conf"), filepath.Join(dir, "nats.conf"))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "testdata", "cluster"), 0o755))
	var moves []string
	replace := map[string]string{}
	for i := range 3 {
		moves = append(moves, fmt.Sprintf("127.0.0.1:%d", 6222+i), routes[i])
		replace[fmt.Sprintf("127.0.0.1:%d", 4222+i)] = clients[i]
	}
	for i := range 3 {
		name := fmt.Sprintf("node%d.conf", i+1)
		copyFile(t, filepath.Join(root, "testdata", "cluster", name), filepath.Join(dir, "testdata", "cluster", name),
			append([]string{"listen: 127.0.0.1:" + fmt.Sprint(4222+i), "listen: " + clients[i]}, moves...)...)
	}
	return docScript(blocks, replace, pasted), dir
}

// TestClusterWalkthroughRunsAsWritten runs docs/cluster.md's walkthrough as
// TestREADMEShellBlocks runs the README's (no key, HTTPS refused, the ports
// moved): three nodes, a worker on the emulator, the thirty demo tasks with
// their two deaths on purpose, none paid twice.
func TestClusterWalkthroughRunsAsWritten(t *testing.T) {
	t.Parallel()
	var clients, routes [3]string
	for i := range 3 {
		clients[i], routes[i] = freeAddr(t), freeAddr(t)
	}
	script, dir := clusterPage(t, clients, routes)
	got, err, hung := runDocBlocksBounded(t, dir, script, 3*time.Minute)
	require.False(t, hung)
	require.NoError(t, err)
	require.Contains(t, got, "2 of 30 tasks not solved")
	require.Contains(t, got, "fakeapi: no task was paid for more than once")
	require.NotContains(t, got, "real API", "nothing reaches the paid service")
	outcomes, err := os.ReadFile(filepath.Join(dir, "outcomes.jsonl"))
	require.NoError(t, err)
	require.Contains(t, string(outcomes), `"id":"demo-007","status":"dead"`)
}

// TestClusterWalkthroughEndsWhenANodeCannotStart: the same with node 3's
// client port held by something that never speaks NATS. The node cannot
// start; the walkthrough ends there, with its error, before the emulator or
// a worker starts.
func TestClusterWalkthroughEndsWhenANodeCannotStart(t *testing.T) {
	t.Parallel()
	clients := [3]string{freeAddr(t), freeAddr(t), squatPort(t)}
	routes := [3]string{freeAddr(t), freeAddr(t), freeAddr(t)}
	script, dir := clusterPage(t, clients, routes)
	got, err, hung := runDocBlocksBounded(t, dir, script, 90*time.Second)
	require.False(t, hung, "the walkthrough still waited after 90s; it should end once a node has failed to start")
	require.Error(t, err)
	require.Contains(t, got, "address already in use")
	require.NotContains(t, got, "$ ./captchaq fakeapi", "the walkthrough stops before the emulator and the worker")
}
