package stream

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// violationLog is a nats-server logger that hands on the violations for
// which the server closes a leaf link (leafPermViolation: "Subscription
// Violation on <subject> - Check other side configuration"); a client's
// violations ("Subscription Violation - Subject …") are not these.
type violationLog struct{ seen chan string }

func (l violationLog) Errorf(format string, v ...any) {
	if msg := fmt.Sprintf(format, v...); strings.Contains(msg, "Check other side configuration") {
		select {
		case l.seen <- msg:
		default:
		}
	}
}
func (violationLog) Noticef(string, ...any) {}
func (violationLog) Warnf(string, ...any)   {}
func (violationLog) Fatalf(string, ...any)  {}
func (violationLog) Debugf(string, ...any)  {}
func (violationLog) Tracef(string, ...any)  {}

// A client at a leaf site that subscribes to a literal subject under the
// hub's JetStream API prefix ($JS.hub.API.…, here a key of a bucket) cuts
// its site's link to the hub. In nats-server v2.15.3:
//   - the hub denies itself sending $JS.hub.API.> over a link from another
//     domain (addLeafNodeConnection, leafnode.go:2260-2269);
//   - a literal subscription arriving over a link is checked against what
//     the hub may send on it, and one it may not send is a permission
//     violation that closes the link (processLeafSub, leafnode.go:3175-3183;
//     leafPermViolation, leafnode.go:3680-3697);
//   - the site withholds the subscriptions its own permissions deny
//     (sendLeafNodeSubUpdate, leafnode.go:2987-3009), which hold $JS.API.>,
//     $KV.> and $OBJ.> (leafnode.go:2221) but not the hub's domain: the hub
//     tells it only the link's configured import and export
//     (sendPermsAndAccountInfo, leafnode.go:2604-2605).
//
// So the site sends the subscription again on every reconnect, the hub
// closes the link each time, and the site's JetStream API requests to the
// hub find no responders. A wildcard subscription on the same subjects is
// taken (the check is for literal subjects; deliveries that match the deny
// are dropped instead) and the link keeps answering.
func TestLiteralSubscriptionUnderHubsDomainCutsTheSiteLink(t *testing.T) {
	t.Parallel()
	for subject, cut := range map[string]bool{
		"$JS.hub.API.$KV.b.*": false,
		"$JS.hub.API.$KV.b.k": true,
	} {
		t.Run(subject, func(t *testing.T) {
			t.Parallel()
			hubLog := violationLog{seen: make(chan string, 1)}
			leafPort := freePort(t)
			hub := startLoggedServer(t, &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true,
				JetStream: true, JetStreamDomain: "hub", StoreDir: t.TempDir(),
				LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort}}, hubLog)
			u, err := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort))
			require.NoError(t, err)
			// A site without JetStream, as testdata/leaf/site.conf. A link
			// the hub closes stays down for the rest of the test.
			site := startServer(t, &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
				LeafNode: server.LeafNodeOpts{ReconnectInterval: time.Minute,
					Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}}})

			nc, err := nats.Connect(site.ClientURL())
			require.NoError(t, err)
			t.Cleanup(nc.Close)
			// The hub's JetStream answers through its domain across the link.
			info := func() error {
				m, err := nc.Request("$JS.hub.API.INFO", nil, 5*time.Second)
				if err == nil && !strings.Contains(string(m.Data), "account_info_response") {
					err = fmt.Errorf("not an account info: %s", m.Data)
				}
				return err
			}
			require.Eventually(t, func() bool { return info() == nil }, 10*time.Second, 10*time.Millisecond)

			_, err = nc.Subscribe(subject, func(*nats.Msg) {})
			require.NoError(t, err)
			require.NoError(t, nc.Flush())
			if !cut {
				// The hub holds the site's wildcard interest: it took the
				// subscription, and the hub's JetStream still answers.
				require.Eventually(t, func() bool { return leafSubscribed(hub, subject) }, 10*time.Second, 10*time.Millisecond)
				require.NoError(t, info())
				select {
				case msg := <-hubLog.seen:
					t.Fatalf("the hub refused the wildcard: %s", msg)
				default:
				}
				return
			}
			select {
			case msg := <-hubLog.seen:
				require.Contains(t, msg, subject)
			case <-time.After(10 * time.Second):
				t.Fatal("the hub took the literal subscription")
			}
			require.Eventually(t, func() bool { return site.NumLeafNodes() == 0 }, 10*time.Second, 10*time.Millisecond, "the link stays up")
			require.ErrorIs(t, info(), nats.ErrNoResponders)
		})
	}
}

// leafSubscribed tells whether a leaf link of ns holds interest in subject.
func leafSubscribed(ns *server.Server, subject string) bool {
	lz, err := ns.Leafz(&server.LeafzOptions{Subscriptions: true})
	if err != nil {
		return false
	}
	for _, l := range lz.Leafs {
		for _, s := range l.Subs {
			if s == subject {
				return true
			}
		}
	}
	return false
}

// A wildcard subscription under the hub's domain at a site hears what
// clients at that site publish there, and nothing from another site or
// the hub itself: the hub sends no $JS.hub.API.> over a link from another
// domain (leafnode.go:2260-2269). So a worker following the timings
// bucket's writes at a site (pool.FollowTimings) hears its own site's
// workers only.
func TestSiteHearsOnlyItsOwnWritesUnderHubsDomain(t *testing.T) {
	t.Parallel()
	leafPort := freePort(t)
	hub := startServer(t, &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		JetStream: true, JetStreamDomain: "hub", StoreDir: t.TempDir(),
		LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort}})
	u, err := url.Parse(fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort))
	require.NoError(t, err)
	conn := func(ns *server.Server) *nats.Conn {
		nc, err := nats.Connect(ns.ClientURL())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	var sites []*nats.Conn
	for range 2 {
		site := startServer(t, &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
			LeafNode: server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}}})
		sites = append(sites, conn(site))
	}
	here, there, atHub := sites[0], sites[1], conn(hub)

	const write, marker = "$JS.hub.API.$KV.b.k", "marker"
	got := make(chan *nats.Msg, 64)
	for _, subject := range []string{"$JS.hub.API.$KV.b.*", marker} {
		_, err := here.Subscribe(subject, func(m *nats.Msg) { got <- m })
		require.NoError(t, err)
	}
	require.NoError(t, here.Flush())
	next := func() *nats.Msg {
		select {
		case m := <-got:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("nothing arrived")
			return nil
		}
	}
	// Both the other site and the hub reach this site's marker
	// subscription. A link keeps the order of what crosses it, so a write
	// that came through would arrive before the marker published after it.
	for i, nc := range []*nats.Conn{there, atHub} {
		require.Eventually(t, func() bool {
			return nc.Publish(marker, nil) == nil && len(got) > 0
		}, 10*time.Second, 10*time.Millisecond)
		mark := fmt.Sprint(i)
		require.NoError(t, nc.Publish(write, nil))
		require.NoError(t, nc.Publish(marker, []byte(mark)))
		for m := next(); string(m.Data) != mark; m = next() {
			require.NotEqual(t, write, m.Subject, "a write from elsewhere reached the site")
		}
	}
	require.NoError(t, here.Publish(write, nil))
	for m := next(); m.Subject != write; m = next() {
		require.Equal(t, marker, m.Subject)
	}
}
