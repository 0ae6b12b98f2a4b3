package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// observerPassword is the password of the user siteObserver adds.
const observerPassword = "observer-test-secret"

// siteObserver adds to a site's options a user "observer" without
// permissions in the account of the site's producers: it sees whatever
// reaches that account, which a producer's role would not let it see.
func siteObserver(opts *server.Options) {
	for _, u := range opts.Users {
		if u.Username == "producer" {
			opts.Users = append(opts.Users, &server.User{Username: "observer", Password: observerPassword, Account: u.Account})
			return
		}
	}
	panic("the site config has no producer")
}

// TestSiteProducerCannotMakeTheServerAnswerIntoAStream: at a site, as at
// the hub, every request the site's producer role may send, with its reply
// subject on every subject a stream stores, has its answer kept out of the
// streams' account: it reaches the producers' side of the site and nowhere
// else, and no stream at the hub stores it. Were it stored, a producer at a
// site could write any record of any task (an outcome, an admin cancel, a
// token), the plan's thread quota and the learned timings, with a body of
// its choice (a direct get of a message it published).
func TestSiteProducerCannotMakeTheServerAnswerIntoAStream(t *testing.T) {
	t.Parallel()
	for _, conf := range []string{"site.conf", "site-js.conf"} {
		t.Run(conf, func(t *testing.T) {
			t.Parallel()
			top := Topology{Domain: "hub"}
			s := startSitesWith(t, top, conf, true, siteObserver)
			ctx := testContext(t)

			// The hub's admin, as captchaq server: answers captchaq.store,
			// sets the plan, and sees whatever is published in the streams'
			// account on the subjects the attacker names as replies.
			anc := s.conn(t, s.hub, "admin")
			hjs, err := topology.JetStream(anc, "hub")
			require.NoError(t, err)
			_, err = anc.Subscribe("captchaq.store", func(m *nats.Msg) { _ = m.Respond([]byte(`{"room":1}`)) })
			require.NoError(t, err)
			require.NoError(t, SetPlan(ctx, hjs.Conn(), top, 2))

			// A worker at the site answers captchaq.reports (as
			// gateway.ServeReports does; no worker takes the attacker's
			// task, so that a direct get answers with its message).
			wnc, _ := roleConn(t, s.site, "worker")
			_, err = wnc.QueueSubscribe("captchaq.reports", "captchaq-reporters", func(m *nats.Msg) {
				_ = m.Respond([]byte(`{"code":"ERROR_WRONG_CAPTCHA_ID"}`))
			})
			require.NoError(t, err)
			require.NoError(t, wnc.Flush())
			hacc, err := s.hub.LookupAccount("CAPTCHAQ")
			require.NoError(t, err)
			require.Eventually(t, func() bool { return hacc.SubscriptionInterest("captchaq.reports") }, 10*time.Second, 10*time.Millisecond,
				"the hub learns of the site's reporter")

			// The attacker: a plain nats.go client with the site's producer role.
			pnc, _ := roleConn(t, s.site, "producer")
			pjs, err := jetstream.New(pnc)
			require.NoError(t, err)
			m := nats.NewMsg("captcha.tasks.fast.normal.atk")
			m.Header.Set(wire.HeaderGen, "1")
			m.Data = []byte(`{"id":"victim","gen":1,"reason":"forged"}`)
			ack, err := pjs.PublishMsg(ctx, m)
			require.NoError(t, err)

			streams := []string{DefaultStream, top.TokenStream(), "CAPTCHA_PLAN", "KV_captchaq-timings"}
			last := func() map[string]uint64 {
				seqs := map[string]uint64{}
				for _, name := range streams {
					st, err := hjs.Stream(ctx, name)
					require.NoError(t, err, name)
					info, err := st.Info(ctx)
					require.NoError(t, err)
					seqs[name] = info.State.LastSeq
				}
				return seqs
			}
			// The replies: every stored subject a producer could aim at.
			// The $KV one crosses no leaf link (nats-server keeps $KV.> off
			// it), so its answer is not counted below; it is sent first.
			kvReply := "$KV.captchaq-timings.turnstile"
			replies := []string{"captcha.results.victim", "captcha.cancels.victim", "captcha.events.victim", "captcha.dead.victim",
				"captcha.cancels.victim.1", "captcha.tasks.fast.normal.victim", "captcha.workers.x", wire.TokenSubject("victim", 1),
				"captcha-plan.threads"}
			inStreams := make(chan *nats.Msg, 1024)
			for _, r := range append([]string{kvReply}, replies...) {
				_, err := anc.ChanSubscribe(r, inStreams)
				require.NoError(t, err)
			}
			require.NoError(t, anc.Flush())
			onc, err := nats.Connect(s.site.ClientURL(), nats.UserInfo("observer", observerPassword))
			require.NoError(t, err)
			t.Cleanup(onc.Close)
			answered := make(chan *nats.Msg, 1024)
			for _, r := range replies {
				_, err := onc.ChanSubscribe(r, answered)
				require.NoError(t, err)
			}
			// The site has the subscriptions before the attacker publishes,
			// and sends them over the link before the attacker's requests.
			require.NoError(t, onc.Flush())
			before := last()

			reqs := producerRequests(ack.Sequence)
			for subj, body := range reqs {
				subj = strings.Replace(subj, "$JS.API.", "$JS.hub.API.", 1)
				for _, reply := range append([]string{kvReply}, replies...) {
					require.NoError(t, pnc.PublishMsg(&nats.Msg{Subject: subj, Reply: reply, Data: []byte(body)}))
				}
			}
			require.NoError(t, pnc.Flush())
			// Every answer reaches the producers' side of the site.
			want := len(reqs) * len(replies)
			for got := 0; got < want; got++ {
				select {
				case <-answered:
				case <-ctx.Done():
					t.Fatalf("%d of %d answers reached the site's producers' account", got, want)
				}
			}
			// An answer published in the streams' account reaches the hub's
			// admin before the site: after a round trip to the hub, none did.
			require.NoError(t, anc.Flush())
			select {
			case m := <-inStreams:
				t.Fatalf("an answer to a site producer's request was published in the streams' account, on %s: %.200s", m.Subject, m.Data)
			default:
			}
			require.Equal(t, before, last(), "an answer to a site producer's request was stored")
		})
	}
}

// TestSiteProducerCannotPlantAToken: a producer at a site publishes a
// message shaped as another producer's token (its own task message, with
// the headers and body of its choice), then direct-gets it with the
// victim's token subject as reply. The victim's task must still be solved
// (paid once) and the victim must get its own answer, never the planted
// one.
func TestSiteProducerCannotPlantAToken(t *testing.T) {
	t.Parallel()
	top := Topology{Domain: "hub"}
	s := startSites(t, top, "site.conf", true)
	ctx := testContext(t)

	vnc, _ := roleConn(t, s.site, "producer")
	victim, err := NewClient(ctx, vnc, ClientConfig{Topology: top, Name: "victim"})
	require.NoError(t, err)
	r, err := victim.Submit(ctx, turnstileTask("victim"))
	require.NoError(t, err)

	anc, _ := roleConn(t, s.site, "producer")
	plantToken(ctx, t, anc, "hub", "victim", r.Seq)

	var solves atomic.Int32
	solve := solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		solves.Add(1)
		b, _ := json.Marshal("tok-" + req.Params["sitekey"])
		return solver.Answer{Solution: b, CaptchaID: fmt.Sprintf("7%d", solves.Load())}, nil
	})
	wnc, _ := roleConn(t, s.site, "worker")
	w, err := NewWorker(ctx, wnc, WorkerConfig{Solver: solve, Threads: 2, Topology: top, IdleCheck: 50 * time.Millisecond})
	require.NoError(t, err)
	runWorker(t, w)

	out, err := victim.Wait(ctx, "victim")
	require.NoError(t, err)
	require.NotEqual(t, `"PLANTED"`, string(out.Solution), "the victim got the attacker's token")
	require.Equal(t, `"tok-0x4AAAAAAAB"`, string(out.Solution))
	require.EqualValues(t, 1, solves.Load(), "the victim's task is solved once")
}

// TestSiteProducersLinkCanDoNoMoreThanAProducer: whoever holds the
// producers' link credentials (a site's operator, a site that applies no
// roles) gets the hub's PRODUCERS account, which reaches the streams only
// through what CAPTCHAQ exports to producers. A client without any
// permission at such a site cannot create a consumer, delete, purge or
// write a record at the hub, in the hub's domain or without one.
func TestSiteProducersLinkCanDoNoMoreThanAProducer(t *testing.T) {
	t.Parallel()
	top := Topology{Domain: "hub"}
	// The site gives its producer every permission.
	s := startSitesWith(t, top, "site.conf", true, func(opts *server.Options) {
		for _, u := range opts.Users {
			if u.Username == "producer" {
				u.Permissions = nil
			}
		}
	})
	ctx := testContext(t)
	hjs, err := topology.JetStream(s.conn(t, s.hub, "admin"), "hub")
	require.NoError(t, err)
	hs, err := hjs.Stream(ctx, DefaultStream)
	require.NoError(t, err)

	pnc, _ := roleConn(t, s.site, "producer")
	producer, err := NewClient(ctx, pnc, ClientConfig{Topology: top, Name: "unbound-producer"})
	require.NoError(t, err)
	r, err := producer.Submit(ctx, turnstileTask("victim"))
	require.NoError(t, err)

	// Forged records of the victim's task, in the hub's subjects.
	for _, subj := range []string{"captcha.results.victim", "captcha.cancels.victim", "captcha.events.victim", wire.TokenSubject("victim", r.Seq)} {
		_, err := pnc.RequestWithContext(ctx, subj, []byte(`{"id":"victim","status":"solved","solution":"FORGED"}`))
		require.ErrorIs(t, err, nats.ErrNoResponders, "a publish on %s was taken", subj)
	}
	// The JetStream API beyond the producer's reads, in the hub's domain
	// and without a domain. Nothing at the hub may take them: an answer,
	// if any, is an error.
	answers := make(chan *nats.Msg, 64)
	inbox := nats.NewInbox()
	_, err = pnc.ChanSubscribe(inbox, answers)
	require.NoError(t, err)
	for _, prefix := range []string{"$JS.hub.API.", "$JS.API."} {
		for subj, body := range map[string]string{
			"CONSUMER.CREATE.CAPTCHA.mine":                  `{"stream_name":"CAPTCHA","config":{"name":"mine","ack_policy":"explicit"}}`,
			"CONSUMER.DURABLE.CREATE.CAPTCHA.mine":          `{"stream_name":"CAPTCHA","config":{"durable_name":"mine","ack_policy":"explicit"}}`,
			"CONSUMER.MSG.NEXT.CAPTCHA.workers-fast-normal": `{"batch":1}`,
			"CONSUMER.DELETE.CAPTCHA.workers-fast-normal":   "",
			"STREAM.MSG.DELETE.CAPTCHA":                     fmt.Sprintf(`{"seq":%d}`, r.Seq),
			"STREAM.PURGE.CAPTCHA":                          "",
			"STREAM.DELETE.CAPTCHA":                         "",
			"STREAM.UPDATE.CAPTCHA":                         `{"name":"CAPTCHA","subjects":["x.>"]}`,
		} {
			require.NoError(t, pnc.PublishRequest(prefix+subj, inbox, []byte(body)))
		}
	}
	// A read the producers' account may make, through the same link, after
	// them: the hub has had every request above by its answer.
	_, err = producer.Trace(ctx, "victim")
	require.NoError(t, err)
	for len(answers) > 0 {
		m := <-answers
		if m.Header.Get("Status") == "503" {
			continue // no responders: the link does not carry $JS.API.>
		}
		require.Contains(t, string(m.Data), `"error"`, "a request was taken: %s %v", m.Data, m.Header)
	}

	// The queue is as it was: the task waits, no consumer was added.
	info, err := hs.Info(ctx, jetstream.WithSubjectFilter("captcha.>"))
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{"captcha.anchor": 1, "captcha.tasks.fast.normal.victim": 1}, info.State.Subjects)
	names := hs.ConsumerNames(ctx)
	var consumers []string
	for n := range names.Name() {
		consumers = append(consumers, n)
	}
	require.NoError(t, names.Err())
	require.ElementsMatch(t, []string{"workers-fast-high", "workers-slow-high", "workers-fast-normal", "workers-slow-normal", "workers-later"}, consumers)
}

// TestForgetfulSiteClientRefused: with the shipped site roles, a client at
// a site that forgets --js-domain is refused, saying where it looked, and
// creates nothing there; an admin's `init` included. At once where the
// site has no JetStream (no one answers: the hint names --js-domain) and
// for the users of the site's own JetStream (its domain, "site"); a
// producer at a site with JetStream gets no answer at all (nats-server
// does not answer for an account without JetStream that has a leaf node
// link), and is refused when its context ends.
func TestForgetfulSiteClientRefused(t *testing.T) {
	t.Parallel()
	for _, conf := range []string{"site.conf", "site-js.conf"} {
		t.Run(conf, func(t *testing.T) {
			t.Parallel()
			s := startSites(t, Topology{Domain: "hub"}, conf, true)
			// Well within the 60 s a refusal by permission would take.
			ctx, cancel := context.WithTimeout(testContext(t), 10*time.Second)
			defer cancel()
			for _, user := range []string{"producer", "worker", "admin"} {
				nc, _ := roleConn(t, s.site, user)
				cctx := ctx
				if conf == "site-js.conf" && user == "producer" {
					var cancel context.CancelFunc
					cctx, cancel = context.WithTimeout(ctx, 2*time.Second)
					defer cancel()
				}
				_, err := NewClient(cctx, nc, ClientConfig{Name: "forgetful-" + user})
				require.Error(t, err, user)
				switch {
				case conf == "site-js.conf" && user != "producer":
					// The site's CAPTCHAQ account has the site's JetStream.
					require.ErrorIs(t, err, ErrNoTopology, user)
					require.ErrorContains(t, err, `stream CAPTCHA not found in JetStream domain "site"`, user)
				case conf == "site-js.conf":
					require.ErrorContains(t, err, "look up stream CAPTCHA in the JetStream reached without a domain: no answer from JetStream", user)
				default:
					require.ErrorIs(t, err, nats.ErrNoResponders, user)
					require.ErrorContains(t, err, "--js-domain", user)
				}
				if user == "worker" {
					_, err = NewWorker(ctx, nc, WorkerConfig{Solver: tokenSolver(), Name: "forgetful"})
					require.Error(t, err)
					require.ErrorContains(t, err, "--js-domain")
				}
			}
			// The admin may not create the topology at the site: with no
			// JetStream there no one answers; the site's own JetStream never
			// gets the request (the role forbids it), so it goes
			// unanswered until the context ends.
			anc, _ := roleConn(t, s.site, "admin")
			js, err := jetstream.New(anc)
			require.NoError(t, err)
			ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err = EnsureTopology(ectx, js.Conn(), Topology{}, true)
			require.Error(t, err, "a second queue at the site")
			if conf == "site-js.conf" {
				jsz, err := s.site.Jsz(nil)
				require.NoError(t, err)
				require.Zero(t, jsz.Streams, "a stream at the site")
			}
		})
	}
}
