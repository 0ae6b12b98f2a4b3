package stream_test

// The wire contract (docs/wire-contract.md) seen from a
// producer that has only a NATS client: these tests publish tasks and read
// outcomes with nats.go and its jetstream package and encoding/json alone —
// no type, constant or function of package stream — so that the subjects,
// headers and JSON fields docs/wire-contract.md promises cannot drift from what the
// workers do. Only the workers come from captchaq (through streamtest).

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// rawProducer is what a Node.js or Python producer has: a NATS connection
// over TCP and a JetStream context.
type rawProducer struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func newRawProducer(t *testing.T, url string) *rawProducer {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("raw-producer"))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return &rawProducer{nc: nc, js: js}
}

// publish sends a task body on captcha.tasks.<lane>.<priority>.<id> with
// Nats-Msg-Id: <id>, as docs/wire-contract.md says.
func (p *rawProducer) publish(t *testing.T, ctx context.Context, lane, priority, id string, body []byte) *jetstream.PubAck {
	t.Helper()
	msg := nats.NewMsg("captcha.tasks." + lane + "." + priority + "." + id)
	msg.Header.Set("Nats-Msg-Id", id)
	msg.Data = body
	ack, err := p.js.PublishMsg(ctx, msg)
	require.NoError(t, err)
	require.Equal(t, "CAPTCHA", ack.Stream)
	return ack
}

// outcome reads the outcome of the task message at sequence gen from
// captcha.results.<id>, whether it was stored before or after the call, as
// the README says, with no consumer: subscribe to the headers the stream
// republishes on captcha.stored.results.<id>, then read the subject's last
// message by direct get (last_by_subj); if it is not the generation's
// outcome yet, a republished header whose Captchaq-Gen is the generation
// names the outcome's sequence, read by direct get too.
func (p *rawProducer) outcome(t *testing.T, ctx context.Context, id string, gen uint64) (*jetstream.RawStreamMsg, map[string]any) {
	t.Helper()
	stored, err := p.nc.SubscribeSync("captcha.stored.results." + id)
	require.NoError(t, err)
	defer func() { _ = stored.Unsubscribe() }()
	require.NoError(t, p.nc.Flush())
	s, err := p.js.Stream(ctx, "CAPTCHA")
	require.NoError(t, err)
	require.True(t, s.CachedInfo().Config.AllowDirect, "direct gets are on")
	want := strconv.FormatUint(gen, 10)
	m, err := s.GetLastMsgForSubject(ctx, "captcha.results."+id)
	if err != nil || m.Header.Get("Captchaq-Gen") != want {
		if err != nil {
			require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
		}
		for {
			h, err := stored.NextMsgWithContext(ctx)
			require.NoError(t, err, "no outcome of task %s", id)
			require.Empty(t, h.Data, "headers only")
			if h.Header.Get("Captchaq-Gen") != want {
				continue // the outcome of an earlier submission of the same id
			}
			seq, err := strconv.ParseUint(h.Header.Get("Nats-Sequence"), 10, 64)
			require.NoError(t, err)
			require.Equal(t, "captcha.results."+id, h.Header.Get("Nats-Subject"))
			m, err = s.GetMsg(ctx, seq)
			require.NoError(t, err)
			break
		}
	}
	var out map[string]any
	require.NoError(t, json.Unmarshal(m.Data, &out))
	// The stream holds the workers' consumers and no other: reading took none.
	names := s.ConsumerNames(ctx)
	var consumers []string
	for n := range names.Name() {
		consumers = append(consumers, n)
	}
	require.NoError(t, names.Err())
	require.ElementsMatch(t, []string{"workers-fast-high", "workers-slow-high", "workers-fast-normal", "workers-slow-normal", "workers-later"}, consumers)
	return m, out
}

func contractContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestContractRawClientSolved(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithListen())
	p := newRawProducer(t, env.URL())
	ctx := contractContext(t)

	// A core subscription sees the outcome as it is stored (`nats sub`).
	live, err := p.nc.SubscribeSync("captcha.results.contract-1")
	require.NoError(t, err)

	body := []byte(`{"id":"contract-1","method":"turnstile",` +
		`"params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/checkout"},` +
		`"deadline":"` + time.Now().Add(time.Minute).UTC().Format(time.RFC3339) + `"}`)
	ack := p.publish(t, ctx, "fast", "normal", "contract-1", body)
	require.False(t, ack.Duplicate)
	again := p.publish(t, ctx, "fast", "normal", "contract-1", body)
	require.True(t, again.Duplicate, "the same Nats-Msg-Id within the window enqueues nothing")
	require.Equal(t, ack.Sequence, again.Sequence)

	m, out := p.outcome(t, ctx, "contract-1", ack.Sequence)
	require.Equal(t, "contract-1", out["id"])
	require.Equal(t, "solved", out["status"])
	require.NotContains(t, out, "solution", "the outcome in CAPTCHA, a file-backed stream, has no token")
	require.EqualValues(t, 1, out["attempts"])
	require.IsType(t, float64(0), out["solve_seconds"])
	expires, err := time.Parse(time.RFC3339Nano, out["expires_at"].(string))
	require.NoError(t, err)
	require.True(t, expires.After(time.Now()))
	require.Equal(t, "contract-1", m.Header.Get("Captchaq-Task-Id"))
	require.Empty(t, m.Header.Get("Nats-TTL"), "the outcome stays for the audit")

	// The token: the last message on captcha.tokens.<id>.<gen> in the
	// memory-backed stream CAPTCHA_TOKENS, while it lives
	// (`nats stream get CAPTCHA_TOKENS --last-for=captcha.tokens.contract-1.<gen>`).
	gen := m.Header.Get("Captchaq-Gen")
	tokens, err := p.js.Stream(ctx, "CAPTCHA_TOKENS")
	require.NoError(t, err)
	require.Equal(t, jetstream.MemoryStorage, tokens.CachedInfo().Config.Storage)
	tm, err := tokens.GetLastMsgForSubject(ctx, "captcha.tokens.contract-1."+gen)
	require.NoError(t, err)
	var tok map[string]any
	require.NoError(t, json.Unmarshal(tm.Data, &tok))
	require.IsType(t, "", tok["solution"], "a Turnstile token is a JSON string")
	require.NotEmpty(t, tok["solution"])
	require.NotEmpty(t, tok["useragent"])
	require.Equal(t, out["expires_at"], tok["expires_at"])
	require.NotEmpty(t, tm.Header.Get("Nats-TTL"), "a token leaves its stream with its lifetime")
	// The outcome names its token by sequence: that message is the one to
	// take (a later one on the subject is not the outcome's).
	require.Equal(t, strconv.FormatUint(tm.Sequence, 10), m.Header.Get("Captchaq-Token-Seq"))
	require.NotEmpty(t, tm.Header.Get("Captchaq-Attempt-Seq"), "a token names its attempt")

	lm, err := live.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, strconv.FormatUint(ack.Sequence, 10), lm.Header.Get("Captchaq-Gen"))
	require.JSONEq(t, string(m.Data), string(lm.Data))
}

func TestContractRawClientDead(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithListen(), streamtest.WithFaults(fakeapi.Faults{Rules: []fakeapi.Rule{
		{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}}}))
	p := newRawProducer(t, env.URL())
	ctx := contractContext(t)

	// Slow lane, high priority; params may be numbers and booleans; no deadline.
	ack := p.publish(t, ctx, "slow", "high", "contract-2", []byte(
		`{"method":"userrecaptcha","params":{"googlekey":"6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-",`+
			`"pageurl":"https://bad.example/login","invisible":true},"priority":"high"}`))
	_, out := p.outcome(t, ctx, "contract-2", ack.Sequence)
	require.Equal(t, "contract-2", out["id"])
	require.Equal(t, "dead", out["status"])
	require.Equal(t, "ERROR_PAGEURL", out["error"])
	require.Equal(t, "permanent", out["reason"])
	require.EqualValues(t, 1, out["attempts"])
	require.NotContains(t, out, "solution")

	// The dead letter keeps the task as published, with why in its headers
	// (stored before the outcome: its last message by direct get).
	s, err := p.js.Stream(ctx, "CAPTCHA")
	require.NoError(t, err)
	m, err := s.GetLastMsgForSubject(ctx, "captcha.dead.contract-2")
	require.NoError(t, err)
	require.Equal(t, "permanent", m.Header.Get("Captchaq-Reason"))
	require.Equal(t, "ERROR_PAGEURL", m.Header.Get("Captchaq-Error"))
	require.Equal(t, "captcha.tasks.slow.high.contract-2", m.Header.Get("Captchaq-Subject"))
}

func TestContractRawClientInvalidTask(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithListen())
	p := newRawProducer(t, env.URL())
	ctx := contractContext(t)

	// A typo in a field name is not ignored: the task is dead, and says why.
	ack := p.publish(t, ctx, "fast", "normal", "contract-3", []byte(
		`{"method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/"},"prority":"high"}`))
	_, out := p.outcome(t, ctx, "contract-3", ack.Sequence)
	require.Equal(t, "dead", out["status"])
	require.Equal(t, "invalid-task", out["reason"])
	require.Equal(t, "INVALID_TASK", out["error"])
}

// TestContractStreamSubjects: every subject in the stream is one docs/wire-contract.md
// lists, and the anchor (captcha.anchor) is there once and never expires.
func TestContractStreamSubjects(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithListen())
	p := newRawProducer(t, env.URL())
	ctx := contractContext(t)

	ack := p.publish(t, ctx, "fast", "high", "contract-4", []byte(
		`{"method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/"}}`))
	_, out := p.outcome(t, ctx, "contract-4", ack.Sequence)
	require.Equal(t, "solved", out["status"])

	s, err := p.js.Stream(ctx, "CAPTCHA")
	require.NoError(t, err)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("captcha.>"))
	require.NoError(t, err)
	listed := regexp.MustCompile(`^captcha\.((tasks|later)\.(slow|fast)\.(high|normal)\.[A-Za-z0-9_-]{1,64}|(events|results|dead|replays|cancels|workers)\.[A-Za-z0-9_-]{1,64}|anchor)$`)
	for subj := range info.State.Subjects {
		require.Regexp(t, listed, subj)
	}
	require.Equal(t, uint64(1), info.State.Subjects["captcha.anchor"])
	anchor, err := s.GetLastMsgForSubject(ctx, "captcha.anchor")
	require.NoError(t, err)
	require.Equal(t, "never", anchor.Header.Get("Nats-TTL"))
}

// A raw producer's task naming use_at as a duration from submission (counted
// from the message's store time) and not_before as an instant is solved no
// earlier than not_before, and its outcome names use_at and the lifetime
// left then.
func TestContractRawClientUseAt(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithListen())
	p := newRawProducer(t, env.URL())
	ctx := contractContext(t)
	notBefore := time.Now().Add(time.Second).UTC()
	body := []byte(`{"id":"contract-jit","method":"turnstile",` +
		`"params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/checkout"},` +
		`"use_at":"2s","not_before":"` + notBefore.Format(time.RFC3339Nano) + `"}`)
	ack := p.publish(t, ctx, "fast", "normal", "contract-jit", body)
	_, out := p.outcome(t, ctx, "contract-jit", ack.Sequence)
	require.Equal(t, "solved", out["status"])
	useAt, err := time.Parse(time.RFC3339Nano, out["use_at"].(string))
	require.NoError(t, err)
	solvedAt, err := time.Parse(time.RFC3339Nano, out["solved_at"].(string))
	require.NoError(t, err)
	expires, err := time.Parse(time.RFC3339Nano, out["expires_at"].(string))
	require.NoError(t, err)
	require.False(t, solvedAt.Before(notBefore), "solved at %v, not before %v", solvedAt, notBefore)
	require.InDelta(t, expires.Sub(useAt).Seconds(), out["lifetime_at_use_s"], 0.01)
}

// A task message carrying Captchaq-Submit-By ends unpaid, SUBMIT_BY_PASSED,
// when the stream stored it after that instant (its producer had given up
// and told its caller so); one stored in time is solved as any other.
func TestContractSubmitByPassedEndsUnpaid(t *testing.T) {
	t.Parallel()
	env := streamtest.Start(t, streamtest.WithListen())
	p := newRawProducer(t, env.URL())
	ctx := contractContext(t)
	send := func(id string, by time.Time) uint64 {
		msg := nats.NewMsg("captcha.tasks.fast.normal." + id)
		msg.Header.Set("Nats-Msg-Id", id)
		msg.Header.Set("Captchaq-Submit-By", by.UTC().Format(time.RFC3339Nano))
		msg.Data = []byte(`{"method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://shop.example/` + id + `"}}`)
		ack, err := p.js.PublishMsg(ctx, msg)
		require.NoError(t, err)
		return ack.Sequence
	}
	lateSeq := send("late-1", time.Now().Add(-time.Second))
	timelySeq := send("timely-1", time.Now().Add(time.Minute))

	_, late := p.outcome(t, ctx, "late-1", lateSeq)
	require.Equal(t, "dead", late["status"], "%v", late)
	require.Equal(t, "SUBMIT_BY_PASSED", late["error"], "%v", late)
	require.Equal(t, "expired", late["reason"], "%v", late)
	require.EqualValues(t, 0, late["attempts"])
	_, timely := p.outcome(t, ctx, "timely-1", timelySeq)
	require.Equal(t, "solved", timely["status"], "%v", timely)
	require.Equal(t, 1, env.Emulator.Stats().Submitted, "the late task reached no service")
}

// The stream's subjects are exactly those the first sentence of
// docs/wire-contract.md's "The stream." paragraph lists ({a,b} spelling
// each of a and b), as a raw client
// reads them from the stream's configuration: a subject added to the stream
// and not to the contract, or listed and not there, fails here.
func TestContractListsExactlyTheStreamsSubjects(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/wire-contract.md")
	require.NoError(t, err)
	_, para, ok := strings.Cut(string(doc), "**The stream.**")
	require.True(t, ok, "the contract has a paragraph on the stream")
	para, _, ok = strings.Cut(para, "Producers publish on")
	require.True(t, ok)
	var listed []string
	for _, m := range regexp.MustCompile("`(captcha\\.[^`]*)`").FindAllStringSubmatch(para, -1) {
		listed = append(listed, expandBraces(m[1])...)
	}
	env := streamtest.Start(t, streamtest.WithListen())
	p := newRawProducer(t, env.URL())
	s, err := p.js.Stream(contractContext(t), "CAPTCHA")
	require.NoError(t, err)
	require.ElementsMatch(t, s.CachedInfo().Config.Subjects, listed, "the stream's subjects, and those docs/wire-contract.md lists")
}

// expandBraces spells out each {a,b,…} of s: "x.{a,b}.{c,d}" is x.a.c,
// x.a.d, x.b.c and x.b.d.
func expandBraces(s string) []string {
	open := strings.IndexByte(s, '{')
	if open < 0 {
		return []string{s}
	}
	end := open + strings.IndexByte(s[open:], '}')
	var out []string
	for _, alt := range strings.Split(s[open+1:end], ",") {
		out = append(out, expandBraces(s[:open]+alt+s[end+1:])...)
	}
	return out
}
