package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// `captchaq server` with the shipped hub.conf drops both links of a site
// whose producers' link logs in as "site" (CAPTCHAQ_HUB_PRODUCERS_LEAF_URL
// copied from CAPTCHAQ_HUB_LEAF_URL) and says which site and what to fix;
// a correctly linked site beside it keeps its links.
func TestServerDropsASitesProducersLinkedAsTheSiteUser(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	hub := startHub(t)
	hub.waitLine("captchaq server ready", 60*time.Second)
	leafPort := hub.leafPort
	hash := func(pw string) string { return bcryptHash(t, pw) }

	// The shipped site.conf, its links' URLs written in.
	site := func(name, producersUser, producersPW string) *server.Server {
		sdir := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.MkdirAll(sdir, 0o755))
		copyFile(t, filepath.Join(root, "testdata", "leaf", "site.conf"), filepath.Join(sdir, "site.conf"),
			"$CAPTCHAQ_PRODUCER_PASSWORD_HASH", `"`+hash("producer-pw")+`"`,
			"$CAPTCHAQ_WORKER_PASSWORD_HASH", `"`+hash("worker-pw")+`"`,
			"$CAPTCHAQ_ADMIN_PASSWORD_HASH", `"`+hash("admin-pw")+`"`,
			"$CAPTCHAQ_HUB_LEAF_URL", fmt.Sprintf(`"nats-leaf://site:site-pw@127.0.0.1:%d"`, leafPort),
			"$CAPTCHAQ_HUB_PRODUCERS_LEAF_URL", fmt.Sprintf(`"nats-leaf://%s:%s@127.0.0.1:%d"`, producersUser, producersPW, leafPort))
		opts, err := server.ProcessConfigFile(filepath.Join(sdir, "site.conf"))
		require.NoError(t, err)
		opts.Port, opts.NoSigs, opts.NoLog = -1, true, true
		opts.LeafNode.ReconnectInterval = 100 * time.Millisecond
		ns, err := server.NewServer(opts)
		require.NoError(t, err)
		go ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
		require.True(t, ns.ReadyForConnections(10*time.Second))
		require.Eventually(t, func() bool { return ns.NumLeafNodes() == 2 }, 30*time.Second, 10*time.Millisecond, "%s links", name)
		return ns
	}
	links := func(ns *server.Server) []uint64 {
		lz, err := ns.Leafz(nil)
		require.NoError(t, err)
		var ids []uint64
		for _, l := range lz.Leafs {
			ids = append(ids, l.ID)
		}
		slices.Sort(ids)
		return ids
	}

	good := site("good", "site-producers", "site-producers-pw")
	goodLinks := links(good)
	bad := site("bad", "site", "site-pw")
	hub.waitLine("site_server="+bad.Name(), 30*time.Second)
	out := hub.output()
	require.Contains(t, out, "CAPTCHAQ_HUB_PRODUCERS_LEAF_URL")
	require.NotContains(t, out, "site-pw", "a link's password in the log")
	require.NotContains(t, out, good.Name(), "the correctly linked site was named")
	require.Equal(t, goodLinks, links(good), "the correctly linked site's links were dropped")
}
