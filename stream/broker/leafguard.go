package broker

import (
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// LeafGuardInterval is how often GuardLeafLinks looks at the leaf node
// links.
const LeafGuardInterval = 250 * time.Millisecond

// MislinkedSite is a site whose two leaf node links both joined the
// streams' account: its producers' link logs in as the streams' link user
// (user "site" in testdata/leaf/hub.conf) instead of the producers'
// ("site-producers").
type MislinkedSite struct {
	// Server is the site's server name (its id when it names none).
	Server string
	// Links are the hub's connection ids of the site's links into the
	// streams' account, in increasing order.
	Links []uint64
}

// MislinkedSites returns the sites with more than one leaf node link into
// account, the streams' account, at ns.
//
// A site links once per account (docs/across-sites.md): its CAPTCHAQ
// account to the hub's CAPTCHAQ, its PRODUCERS account to the hub's
// PRODUCERS. nats-server's Leafz tells the hub, per link, the remote
// server's name and the hub-side account, not which of the site's accounts
// the link carries; two links of one server in the streams' account mean
// that one of them carries an account that has no business there, the
// producers' being the only other one the shipped site configs link.
//
// A link that reconnects replaces its old connection, which nats-server
// closes right after listing the new one: a caller that acts on the
// result counts only links it has seen before (GuardLeafLinks does).
func MislinkedSites(ns *server.Server, account string) []MislinkedSite {
	lz, err := ns.Leafz(&server.LeafzOptions{Account: account})
	if err != nil || lz == nil {
		return nil
	}
	byServer := map[string][]uint64{}
	for _, l := range lz.Leafs {
		if l.Account != account || l.Name == "" {
			continue
		}
		byServer[l.Name] = append(byServer[l.Name], l.ID)
	}
	var out []MislinkedSite
	for name, ids := range byServer {
		if len(ids) > 1 {
			sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
			out = append(out, MislinkedSite{Server: name, Links: ids})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Server < out[j].Server })
	return out
}

// GuardLeafLinks watches ns's leaf node links, every LeafGuardInterval,
// until stop is called, and disconnects both links of a site that has two
// in account, the streams' account (MislinkedSites): through the second
// one the site's producers could have JetStream's answers stored in the
// streams (a token of their choice for another's task). The site
// reconnects and is dropped again, for as long as its config is wrong; log
// gets one error per site server naming it and what to fix.
//
// nats-server's events about leaf node links go to the system account,
// which the shipped configs do not give a user, hence the polling: a
// wrongly linked site keeps its links up to two intervals after each
// reconnect (a second apart: nats-server's default reconnect interval).
func GuardLeafLinks(ns *server.Server, account string, log *slog.Logger) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		told := map[string]bool{}
		seen := map[uint64]bool{}
		t := time.NewTicker(LeafGuardInterval)
		defer t.Stop()
		for {
			now := map[uint64]bool{}
			for _, s := range MislinkedSites(ns, account) {
				// Only links seen by the check before: a link that just
				// replaced its old connection (a reconnect) is listed with
				// it for a moment.
				var ids []uint64
				for _, id := range s.Links {
					now[id] = true
					if seen[id] {
						ids = append(ids, id)
					}
				}
				if len(ids) < 2 {
					continue
				}
				for _, id := range ids {
					// Gone already is fine: the link is what we want gone.
					_ = ns.DisconnectClientByID(id)
					delete(now, id)
				}
				if told[s.Server] || log == nil {
					continue
				}
				told[s.Server] = true
				log.Error("dropped both leaf node links of a site: both log in to the streams' account "+account+
					", so the site's producers could have answers written into the streams; at the site, CAPTCHAQ_HUB_PRODUCERS_LEAF_URL "+
					"must log in as the producers' link user (site-producers in testdata/leaf/hub.conf), not as the streams' (site); "+
					"the site's links are dropped again each time they come back until it is fixed",
					slog.String("site_server", s.Server), slog.String("account", account))
			}
			seen = now
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

// AccountOf is the name of the account of ns's client connection cid
// ("$G", nats-server's global account, in a config without accounts), or
// "" when ns has no such connection. The account captchaq server's admin
// connection is in is the streams' account.
func AccountOf(ns *server.Server, cid uint64) string {
	cz, err := ns.Connz(&server.ConnzOptions{CID: cid, Username: true})
	if err != nil || cz == nil || len(cz.Conns) != 1 {
		return ""
	}
	if a := cz.Conns[0].Account; a != "" {
		return a
	}
	return server.DEFAULT_GLOBAL_ACCOUNT
}
