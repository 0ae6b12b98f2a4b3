package broker

import (
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// LeafGuardInterval is how often GuardLeafLinks looks at the leaf node
// links.
const LeafGuardInterval = 250 * time.Millisecond

// Mislink is what is wrong with a site's leaf node links.
type Mislink int

const (
	// BothInStreamsAccount: both of the site's links joined the streams'
	// account; its producers' link logs in as the streams' link user
	// (user "site" in testdata/leaf/hub.conf) instead of the producers'
	// ("site-producers"). The site's producers have the streams' account.
	BothInStreamsAccount Mislink = iota + 1
	// Swapped: the site's workers' link joined another account (workers
	// subscribe over it) while another link of the site joined the streams'
	// account: the two URLs are swapped. The site's producers have the
	// streams' account, and its workers cannot work.
	Swapped
	// WorkersOutside: the site's workers' link joined another account and
	// no link of the site is in the streams' account: its workers cannot
	// work (they say the stream does not answer), and nothing is exposed.
	WorkersOutside
)

// MislinkedSite is a site whose leaf node links joined the wrong accounts
// at the hub.
type MislinkedSite struct {
	// Server is the site's server name (its id when it names none).
	Server string
	// What is wrong.
	What Mislink
	// Links are the hub's connection ids of the site's links that join
	// the wrong accounts, in increasing order: the links in the streams'
	// account, and for Swapped and WorkersOutside the links that carry the
	// workers' subscriptions outside it.
	Links []uint64
}

// LeafGuard says what GuardLeafLinks and MislinkedSites look for.
type LeafGuard struct {
	// Account is the streams' account.
	Account string
	// WorkerSubjects are subject prefixes only the streams' account
	// subscribes to (a worker's wake-ups, captcha.stored.tasks.): a link
	// outside Account that carries a subscription to one comes from a
	// site's streams' account. None: only BothInStreamsAccount is found.
	WorkerSubjects []string
	// Logger gets one error per site server and kind of mistake.
	Logger *slog.Logger
}

// MislinkedSites returns the sites whose leaf node links at ns join the
// wrong accounts.
//
// A site links once per account (docs/across-sites.md): its CAPTCHAQ
// account to the hub's CAPTCHAQ, its PRODUCERS account to the hub's
// PRODUCERS. nats-server's Leafz tells the hub, per link, the remote
// server's name, the hub-side account and the subscriptions the link
// carries, not which of the site's accounts the link carries. Two links of
// one server in the streams' account mean that one of them carries an
// account that has no business there, the producers' being the only other
// one the shipped site configs link. A link outside the streams' account
// that carries a worker's subscription carries the site's streams'
// account; if that site has a link in the streams' account too, it is the
// producers' (Swapped). A swapped site whose workers are not running
// carries no worker subscription and is not found.
//
// A link that reconnects replaces its old connection, which nats-server
// closes right after listing the new one: a caller that acts on the
// result counts only links it has seen before (GuardLeafLinks does).
func (g LeafGuard) MislinkedSites(ns *server.Server) []MislinkedSite {
	lz, err := ns.Leafz(&server.LeafzOptions{Subscriptions: len(g.WorkerSubjects) > 0})
	if err != nil || lz == nil {
		return nil
	}
	inside := map[string][]uint64{}  // server → its links into Account
	outside := map[string][]uint64{} // server → its links elsewhere with worker interest
	for _, l := range lz.Leafs {
		if l.Name == "" {
			continue
		}
		if l.Account == g.Account {
			inside[l.Name] = append(inside[l.Name], l.ID)
			continue
		}
		if g.workerInterest(l.Subs) {
			outside[l.Name] = append(outside[l.Name], l.ID)
		}
	}
	var out []MislinkedSite
	for name, ids := range inside {
		switch {
		case len(ids) > 1:
			out = append(out, MislinkedSite{Server: name, What: BothInStreamsAccount, Links: ids})
		case len(outside[name]) > 0:
			out = append(out, MislinkedSite{Server: name, What: Swapped, Links: append(ids, outside[name]...)})
		}
	}
	for name, ids := range outside {
		if len(inside[name]) == 0 {
			out = append(out, MislinkedSite{Server: name, What: WorkersOutside, Links: ids})
		}
	}
	for _, m := range out {
		sort.Slice(m.Links, func(i, j int) bool { return m.Links[i] < m.Links[j] })
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Server < out[j].Server })
	return out
}

func (g LeafGuard) workerInterest(subs []string) bool {
	for _, s := range subs {
		for _, p := range g.WorkerSubjects {
			if strings.HasPrefix(s, p) {
				return true
			}
		}
	}
	return false
}

// GuardLeafLinks watches ns's leaf node links, every LeafGuardInterval,
// until stop is called. It disconnects the links of a site whose
// producers' link joined the streams' account (BothInStreamsAccount,
// Swapped): through it the site's producers could have JetStream's answers
// stored in the streams (a token of their choice for another's task). The
// site reconnects and is dropped again, for as long as its config is
// wrong. g.Logger gets one error per site server and mistake, naming the
// site and what to fix; a site whose workers' link alone is wrong
// (WorkersOutside) keeps its links and is only named.
//
// nats-server's events about leaf node links go to the system account,
// which the shipped configs do not give a user, hence the polling: a
// wrongly linked site keeps its links up to two intervals after each
// reconnect (a second apart: nats-server's default reconnect interval).
func GuardLeafLinks(ns *server.Server, g LeafGuard) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		type site struct {
			server string
			what   Mislink
		}
		told := map[site]bool{}
		seen := map[uint64]bool{}
		t := time.NewTicker(LeafGuardInterval)
		defer t.Stop()
		for {
			now := map[uint64]bool{}
			for _, s := range g.MislinkedSites(ns) {
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
				if len(ids) < len(s.Links) {
					continue
				}
				if s.What != WorkersOutside {
					for _, id := range ids {
						// Gone already is fine: the link is what we want gone.
						_ = ns.DisconnectClientByID(id)
						delete(now, id)
					}
				}
				key := site{s.Server, s.What}
				if told[key] || g.Logger == nil {
					continue
				}
				told[key] = true
				g.Logger.Error(g.explain(s.What), slog.String("site_server", s.Server), slog.String("account", g.Account))
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

func (g LeafGuard) explain(m Mislink) string {
	switch m {
	case BothInStreamsAccount:
		return "dropped both leaf node links of a site: both log in to the streams' account " + g.Account +
			", so the site's producers could have answers written into the streams; at the site, CAPTCHAQ_HUB_PRODUCERS_LEAF_URL " +
			"must log in as the producers' link user (site-producers in testdata/leaf/hub.conf), not as the streams' (site); " +
			"the site's links are dropped again each time they come back until it is fixed"
	case Swapped:
		return "dropped both leaf node links of a site: they are swapped, its producers' link logs in to the streams' account " + g.Account +
			" (so they could have answers written into the streams) and its workers' link to another account (so they cannot work); " +
			"at the site, CAPTCHAQ_HUB_LEAF_URL must log in as site and CAPTCHAQ_HUB_PRODUCERS_LEAF_URL as site-producers " +
			"(the users of testdata/leaf/hub.conf); the site's links are dropped again each time they come back until it is fixed"
	default:
		return "a site's workers' leaf node link logs in to another account than the streams' " + g.Account +
			", so they cannot work (they say the stream does not answer); at the site, CAPTCHAQ_HUB_LEAF_URL must log in as " +
			"the streams' link user (site in testdata/leaf/hub.conf)"
	}
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
