package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/tracing"
	"github.com/captchaq/captchaq/stream/wire"
)

// ClientConfig configures a producer Client. The zero value is usable.
type ClientConfig struct {
	// Topology must match the workers'. Only Stream, Retention and Domain
	// matter to a producer: a producer finds the stream an admin created
	// (EnsureTopology), and never creates or changes one.
	Topology Topology
	// DefaultDeadline is given to tasks submitted without one. Default 10m.
	DefaultDeadline time.Duration
	// Name identifies this producer in the audit trail (header
	// Captchaq-Client). Default: the NATS connection's name.
	Name string
	// Now is the clock of what the client stamps and decides on (see the
	// package documentation, "Clocks"). Default time.Now.
	Now func() time.Time
}

// validate reports the first field of cfg that is out of range, by name.
// Zero fields take their defaults (withDefaults); nothing else is replaced.
func (cfg ClientConfig) validate() error {
	if err := atLeastZero("client", "DefaultDeadline", cfg.DefaultDeadline, DefaultDeadline); err != nil {
		return err
	}
	if err := cfg.Topology.validate(); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return nil
}

// withDefaults is cfg with its zero fields set to their defaults; the
// default Name is nc's.
func (cfg ClientConfig) withDefaults(nc *nats.Conn) ClientConfig {
	if cfg.DefaultDeadline == 0 {
		cfg.DefaultDeadline = DefaultDeadline
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Name == "" {
		cfg.Name = nc.Opts.Name
	}
	return cfg
}

// DefaultDeadline is how long a task stays useful when it names no deadline.
const DefaultDeadline = 10 * time.Minute

// Client submits tasks and waits for their outcomes. It is safe for
// concurrent use.
type Client struct {
	nc *nats.Conn
	js jetstream.JetStream
	s  jetstream.Stream
	// tokens is the token stream (tokenstream.go).
	tokens jetstream.Stream
	cfg    ClientConfig
	top    Topology
	// cancelKeys holds the cancel secret of each task Solve submitted, by
	// id, until its outcome arrives.
	cancelKeys sync.Map
	// cancelHashes holds the hash taskMsg puts on a task Solve is submitting.
	cancelHashes sync.Map
	// own is the generation of this Client's latest submission of each id
	// it submitted, for Wait.
	own ownGens
	// readers are idle direct readers (read.go).
	readers *jscall.ReaderPool
	// room is the last reading of the room a bounded stream has (checkRoom).
	room clientRoom
	// limit is the stream's MaxBytes as read at limitRead (streamLimit).
	limitMu   sync.Mutex
	limit     int64
	limitRead time.Time
	// clock reads the broker's clock (brokerTime), from the stream info
	// NewClient got: token expiry and default deadlines are on it.
	clock jscall.BrokerClock
	// bound is when the client bound to the stream, on the real clock
	// (with its monotonic reading), and boundBroker the broker's clock
	// then: brokerNow counts from them, so a step of the client's clock
	// after it bound moves no instant it stamps for the broker.
	bound, boundBroker time.Time
}

// NewClient binds a producer to the CAPTCHA stream on nc, in
// cfg.Topology.Domain. It creates nothing: without the stream it fails
// with ErrNoTopology, naming the domain it reached.
func NewClient(ctx context.Context, nc *nats.Conn, cfg ClientConfig) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(nc)
	js, err := jetStreamOf(nc, cfg.Topology, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return nil, err
	}
	top := cfg.Topology.withDefaults()
	sent := cfg.Now()
	s, tokens, err := openTopology(ctx, js, top)
	if err != nil {
		return nil, err
	}
	c := &Client{nc: nc, js: js, s: s, tokens: tokens, cfg: cfg, top: top, limit: s.CachedInfo().Config.MaxBytes, limitRead: time.Now(),
		readers: jscall.NewReaderPool(nc, top.Domain, top.Stream)}
	// The stream's info carries the broker's clock when it answered: the
	// client's reading of it, for the times it stamps and decides on.
	if at := s.CachedInfo().TimeStamp; !at.IsZero() {
		c.clock.Set(jscall.ClockOffset(at, sent, cfg.Now()))
	}
	c.bound, c.boundBroker = time.Now(), c.brokerTime(cfg.Now())
	return c, nil
}

// brokerNow is the broker's clock now: the later of the client's clock
// moved by its offset and the broker's reading when the client bound plus
// the time that really passed since (a monotonic reading). The first is
// behind after the client's clock stepped back since it bound (an NTP
// correction), the second after the machine was suspended (a monotonic
// clock stands still then); an instant stamped too early would end a task
// at once (SUBMIT_BY_PASSED, DEADLINE_PASSED), one a little late only
// stretches it.
func (c *Client) brokerNow() time.Time {
	return wire.Latest(c.brokerTime(c.cfg.Now()), c.boundBroker.Add(time.Since(c.bound)))
}

// brokerTime is t, a time of the client's clock, on the broker's clock.
func (c *Client) brokerTime(t time.Time) time.Time {
	return c.clock.BrokerTime(t)
}

// localTime is t, a time of the broker's clock, on the client's clock.
func (c *Client) localTime(t time.Time) time.Time {
	return c.clock.LocalTime(t)
}

// Domain is the JetStream domain the client's stream lives in
// (ClientConfig.Topology.Domain).
func (c *Client) Domain() string { return c.top.Domain }

// AuthRequired reports whether the NATS server the client reached asks for
// credentials; false on a server without users (a local trial), where every
// connection, whatever name it gives, has every permission.
func (c *Client) AuthRequired() bool { return c.nc.AuthRequired() }

// Receipt says where a submitted task went.
type Receipt struct {
	// ID is the task's id (generated when the task had none).
	ID string `json:"id"`
	// Seq is the task's stream sequence: its generation.
	Seq uint64 `json:"seq"`
	// Duplicate is true when the stream already had a task with this id in
	// its duplicate window; nothing new was enqueued.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Prepare validates a task and fills in what Submit would: the id and the
// deadline. It publishes nothing. SubmitAll uses it to check a whole batch
// before publishing any of it.
func (c *Client) Prepare(t Task) (Task, error) {
	now := c.cfg.Now()
	if err := t.Validate(now); err != nil {
		return t, err
	}
	if t.ID == "" {
		t.ID = nuid.Next()
	}
	// A duration from submission becomes an instant on the broker's clock,
	// as the default deadline is: the stored task names instants. The
	// broker's clock is read as the time passed since the client bound
	// (brokerNow), so a step of the client's clock since moves none of
	// them.
	bnow := c.brokerNow()
	if t.UseAt.In != 0 {
		t.UseAt = wire.At(bnow.Add(t.UseAt.In))
	}
	if t.NotBefore.In != 0 {
		t.NotBefore = wire.At(bnow.Add(t.NotBefore.In))
	}
	if t.Deadline.IsZero() {
		// On the broker's clock, which workers judge deadlines on: a
		// producer whose clock is off does not shorten or stretch it. A
		// deadline the caller gives is an instant of its own clock. The
		// default window counts from when the task may start.
		t.Deadline = wire.Latest(bnow, t.UseAt.At, t.NotBefore.At).Add(c.cfg.DefaultDeadline)
		now = bnow
	}
	for _, f := range []struct {
		name string
		at   time.Time
	}{{"use_at", t.UseAt.At}, {"not_before", t.NotBefore.At}} {
		if f.at.Sub(now) > c.top.Retention {
			return t, &TaskError{ID: t.ID, Err: fmt.Errorf("%s %s: further away than the stream's retention %s",
				f.name, f.at.Format(time.RFC3339), c.top.Retention)}
		}
	}
	if t.Deadline.Sub(now) > c.top.Retention {
		return t, &TaskError{ID: t.ID, Err: fmt.Errorf("deadline %s: further away than the stream's retention %s",
			t.Deadline.Format(time.RFC3339), c.top.Retention)}
	}
	if t.Priority == "" {
		t.Priority = wire.PriorityNormal
	}
	return t, nil
}

// Submit validates a task and enqueues it. The task id is the message id, so
// a Submit retried after a timeout never enqueues the task twice. The first
// submission under an id stands: a task whose id the stream already has
// (Receipt.Duplicate) with another use_at or not_before is not enqueued, and
// Submit returns its receipt with ErrIDTaken naming the field.
//
// Under a context with a deadline, the task must be stored a second before
// it (its submit-by instant): a Submit that returns an error has left
// nothing that will be paid, since a worker ends a task the broker stored
// after that instant without an attempt (code SUBMIT_BY_PASSED). When the
// broker gave no answer in time, the error is a *NotConfirmedError
// (ErrNotConfirmed): the broker may still have stored it in time, and
// Wait(id) says what became of it.
func (c *Client) Submit(ctx context.Context, t Task) (Receipt, error) {
	given := t
	t, err := c.Prepare(t)
	if err != nil {
		return Receipt{}, err
	}
	return c.publish(ctx, given, t)
}

// SubmitAll validates every task first and publishes none if any is invalid;
// the error then names each invalid task by its 1-based position. Otherwise
// it enqueues them in order and returns their receipts. A task whose id the
// stream already has with another use_at or not_before is reported as
// Submit reports it, in the error returned with every receipt.
func (c *Client) SubmitAll(ctx context.Context, tasks []Task) ([]Receipt, error) {
	prepared := make([]Task, len(tasks))
	var errs []error
	for i, t := range tasks {
		p, err := c.Prepare(t)
		if err != nil {
			var te *TaskError
			if errors.As(err, &te) {
				te.Line = i + 1
			}
			errs = append(errs, err)
			continue
		}
		prepared[i] = p
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	msgs := make([]*nats.Msg, len(prepared))
	var size int64
	var sb submitByStamp // every task's, from ctx's deadline
	for i, t := range prepared {
		m, err := c.taskMsg(t)
		if err != nil {
			return nil, err
		}
		injectTrace(ctx, m)
		sb = c.stampSubmitBy(ctx, m)
		msgs[i] = m
		size += int64(len(m.Data))
	}
	if err := c.checkRoom(ctx, len(msgs), size); err != nil {
		return nil, err
	}
	return c.publishAll(ctx, tasks, prepared, msgs, sb)
}

// submitWindow is how many task publishes SubmitAll keeps in flight at once.
const submitWindow = 256

// publishAll publishes the task messages pipelined, submitWindow at a time,
// and returns the receipts in order. A publish whose acknowledgement does not
// come is retried synchronously with the same message id, so nothing is lost
// and nothing doubled. On an error it returns the receipts of the tasks
// before the failed one: those are enqueued. sb is the tasks' submit-by
// instant, as publish checks it.
func (c *Client) publishAll(ctx context.Context, given, tasks []Task, msgs []*nats.Msg, sb submitByStamp) ([]Receipt, error) {
	out := make([]Receipt, 0, len(tasks))
	var taken []error // duplicates with another schedule
	type pending struct {
		i   int
		fut jetstream.PubAckFuture // nil: publish synchronously
	}
	var window []pending
	flush := func() error {
		for _, p := range window {
			var ack *jetstream.PubAck
			if p.fut != nil {
				select {
				case ack = <-p.fut.Ok():
				case <-p.fut.Err():
				case <-ctx.Done():
					return fmt.Errorf("submit task %s: %w", tasks[p.i].ID, ctx.Err())
				}
			}
			if ack == nil {
				var err error
				if ack, err = c.publishMsg(ctx, tasks[p.i], msgs[p.i]); err != nil {
					return sb.publishFailed(tasks[p.i].ID, err)
				}
			}
			if err := c.confirmedInTime(ctx, sb, tasks[p.i].ID, ack.Sequence, msgs[p.i]); err != nil {
				return err
			}
			r := Receipt{ID: tasks[p.i].ID, Seq: ack.Sequence, Duplicate: ack.Duplicate}
			if !r.Duplicate {
				c.own.put(r.ID, r.Seq)
			}
			if r.Duplicate {
				if err := c.sameSchedule(ctx, given[p.i], msgs[p.i], r); err != nil {
					taken = append(taken, err)
				}
			}
			out = append(out, r)
		}
		window = window[:0]
		return nil
	}
	for i, t := range tasks {
		fut, err := c.js.PublishMsgAsync(msgs[i], jetstream.WithMsgID(t.ID), jetstream.WithExpectStream(c.top.Stream))
		if err != nil {
			fut = nil
		}
		window = append(window, pending{i: i, fut: fut})
		if len(window) == submitWindow {
			if err := flush(); err != nil {
				return out, err
			}
		}
	}
	if err := flush(); err != nil {
		return out, err
	}
	return out, errors.Join(taken...)
}

func (c *Client) publish(ctx context.Context, given, t Task) (Receipt, error) {
	msg, err := c.taskMsg(t)
	if err != nil {
		return Receipt{}, err
	}
	injectTrace(ctx, msg)
	sb := c.stampSubmitBy(ctx, msg)
	if err := c.checkRoom(ctx, 1, int64(len(msg.Data))); err != nil {
		return Receipt{}, err
	}
	ack, err := c.publishMsg(ctx, t, msg)
	if err != nil {
		return Receipt{}, sb.publishFailed(t.ID, err)
	}
	if err := c.confirmedInTime(ctx, sb, t.ID, ack.Sequence, msg); err != nil {
		return Receipt{}, err
	}
	r := Receipt{ID: t.ID, Seq: ack.Sequence, Duplicate: ack.Duplicate}
	if r.Duplicate {
		return r, c.sameSchedule(ctx, given, msg, r)
	}
	c.own.put(r.ID, r.Seq)
	return r, nil
}

// A submission whose caller gives up (its context ends) before the
// broker's acknowledgement comes cannot take back what it sent: the message
// may wait in the connection's buffers, or in the kernel's, while the
// broker is stalled (a SIGSTOP, a long pause), and be stored when it
// resumes, long after the caller was told the submission failed. The
// caller, told so, submits again, and the service would be paid twice. So
// a submission under a deadline carries the instant by which it must be
// stored (wire.HeaderSubmitBy, on the broker's clock): submitSlack before
// the caller's deadline. A worker ends a task stored later without an
// attempt (code SUBMIT_BY_PASSED): what the caller was told stands. The
// slack covers the error of the client's reading of the broker's clock (at
// most the round trip of the request it was read from) and the time an
// acknowledgement takes to come back.
//
// One case remains that no one can know at the moment: the broker stored
// the task in time and its acknowledgement was lost. The caller then gets
// a *NotConfirmedError (not "it failed"), naming the id under which
// Wait says what became of it: solved, or ended with SUBMIT_BY_PASSED, or
// not found (never stored, and never to be solved).

// submitSlack is how long before its context's deadline a submission must
// be stored.
const submitSlack = time.Second

// submitByStamp is the submit-by instant of a submission, on this
// process's clock (by), when its context has a deadline (ok).
type submitByStamp struct {
	by time.Time
	ok bool
}

// stampSubmitBy stamps msg, a task message published under ctx, with its
// submit-by instant on the broker's clock (wire.HeaderSubmitBy), when ctx
// has a deadline. The deadline is on the real clock, and so is the time
// since the client read the broker's clock: a step of the client's clock
// since (an NTP correction) does not stamp an instant already passed,
// which would end the task unsolved.
func (c *Client) stampSubmitBy(ctx context.Context, msg *nats.Msg) submitByStamp {
	by, ok := submitBy(ctx, time.Now())
	if ok {
		msg.Header.Set(wire.HeaderSubmitBy, c.brokerNow().Add(time.Until(by)).UTC().Format(time.RFC3339Nano))
	}
	return submitByStamp{by: by, ok: ok}
}

// publishFailed is the error of a publish of task id that failed: a
// *NotConfirmedError when the broker may have stored it in time.
func (sb submitByStamp) publishFailed(id string, err error) error {
	if sb.ok && unconfirmed(err) {
		return &NotConfirmedError{ID: id, By: sb.by, Err: err}
	}
	return err
}

// confirmedInTime checks, for a publish confirmed near or after its
// submit-by instant, that the task was stored by then (storedInTime): the
// stored time decides whether a worker solves it.
func (c *Client) confirmedInTime(ctx context.Context, sb submitByStamp, id string, seq uint64, msg *nats.Msg) error {
	if !sb.ok || time.Now().Before(sb.by.Add(-submitSlack)) {
		return nil
	}
	return c.storedInTime(ctx, id, seq, msg.Header.Get(wire.HeaderSubmitBy), sb.by)
}

// submitBy is the instant (on this process's clock) by which a submission
// under ctx must be stored: submitSlack before ctx's deadline, or a quarter
// of what is left of it when that is shorter. ok is false when ctx has no
// deadline: its caller waits for the answer however long it takes.
func submitBy(ctx context.Context, now time.Time) (by time.Time, ok bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Time{}, false
	}
	left := dl.Sub(now)
	return dl.Add(-min(submitSlack, max(left/4, 0))), true
}

// storedInTime checks that the task message at seq was stored by its
// submit-by instant (header value byHeader): a worker ends one stored later
// unsolved, so a Submit that returned its receipt would tell its caller a
// task would be solved that will not be. A message it cannot read leaves
// that open: a *NotConfirmedError.
func (c *Client) storedInTime(ctx context.Context, id string, seq uint64, byHeader string, by time.Time) error {
	m, err := c.s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // ended and erased already: it was taken
	}
	if err != nil {
		return &NotConfirmedError{ID: id, By: by, Err: fmt.Errorf("read the stored task: %w", err)}
	}
	if bh, late := wire.StoredLate(id, nats.Header{wire.HeaderSubmitBy: {byHeader}, wire.HeaderMsgID: {id}}, m.Time); late {
		return fmt.Errorf("submit task %s: stored at %s, after its submit-by %s: it ends unsolved (%s) and is not paid; submit it again under another id",
			id, m.Time.UTC().Format(time.RFC3339Nano), bh.UTC().Format(time.RFC3339Nano), wire.CodeSubmitByPassed)
	}
	return nil
}

// unconfirmed reports whether err, a publish's failure, leaves open
// whether the broker stored the message: no answer came (a timeout, the
// context's end, a lost connection). An answer of the broker's (an API
// error: the stream refused it) or a message too large to send is a
// definite no.
func unconfirmed(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) || errors.Is(err, ErrStreamFull) || errors.Is(err, nats.ErrMaxPayload) {
		return false
	}
	return true
}

// scheduleSlack is how far apart the instants of a duplicate's use_at or
// not_before and the stored task's may be and still be the same: the
// stored one was taken on the broker's clock a moment before its message
// was stored, and a duration counts from that store time.
const scheduleSlack = 2 * time.Second

// sameSchedule checks that r, a receipt the stream answered as a duplicate
// of msg, the message of given (the task as its caller gave it), is a
// submission with the stored task's use_at and not_before: the first
// submission under an id stands, and a caller who asked for another time
// must hear that the token comes at the first's. A duration counts from the
// stored message's time, so the same "in 10m" submitted again a minute
// later is the same submission. A stored message that is gone (its task
// ended and was erased) is not compared.
func (c *Client) sameSchedule(ctx context.Context, given Task, msg *nats.Msg, r Receipt) error {
	m, err := c.s.GetMsg(ctx, r.Seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("task %s: the stream has a submission under this id (sequence %d); read it: %w", r.ID, r.Seq, err)
	}
	if bytes.Equal(m.Data, msg.Data) {
		return nil // this very message, its publish retried
	}
	stored, err := wire.ParseTask(m.Data)
	if err != nil {
		return fmt.Errorf("task %s: %w (stream sequence %d), which is not a valid task: submit under another id", r.ID, ErrIDTaken, r.Seq)
	}
	for _, f := range []struct {
		name          string
		stored, given wire.When
	}{{"use_at", stored.UseAt, given.UseAt}, {"not_before", stored.NotBefore, given.NotBefore}} {
		was, asked := f.stored.From(m.Time), f.given.From(m.Time)
		if was.IsZero() == asked.IsZero() && (was.IsZero() || was.Sub(asked).Abs() <= scheduleSlack) {
			continue
		}
		return fmt.Errorf("task %s: %w (stream sequence %d) with %s %s, not %s: the first stands; submit under another id",
			r.ID, ErrIDTaken, r.Seq, f.name, instantText(was), instantText(asked))
	}
	return nil
}

// instantText is t in RFC 3339, or "none" when zero.
func instantText(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}

// taskMsg builds the message of a prepared task.
func (c *Client) taskMsg(t Task) (*nats.Msg, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("encode task %s: %w", t.ID, err)
	}
	// Less a margin for the message's own headers (id, client, cancel hash).
	if most := wire.WholeDeadLetterMax(c.nc.MaxPayload()) - 1024; most > 0 && int64(len(b)) > most {
		return nil, &TaskError{ID: t.ID, Err: fmt.Errorf("task is %d bytes, the server takes at most %d", len(b), most)}
	}
	msg := nats.NewMsg(wire.TaskSubject(LaneOf(t.Method, t.Params), t.Queue(), t.ID))
	msg.Data = b
	msg.Header.Set(wire.HeaderTaskID, t.ID)
	if c.cfg.Name != "" {
		msg.Header.Set(wire.HeaderClient, c.cfg.Name)
	}
	if h, ok := c.cancelHashes.Load(t.ID); ok {
		msg.Header.Set(wire.HeaderCancelHash, h.(string))
	}
	return msg, nil
}

// publishMsg publishes one task message, retrying with its message id.
func (c *Client) publishMsg(ctx context.Context, t Task, msg *nats.Msg) (*jetstream.PubAck, error) {
	var ack *jetstream.PubAck
	err := c.whileStoreTakes(ctx, func(ctx context.Context) (err error) {
		ack, err = jscall.PublishRetrying(ctx, c.js, msg, jetstream.WithMsgID(t.ID), jetstream.WithExpectStream(c.top.Stream))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("submit task %s: %w", t.ID, c.fullError(ctx, err))
	}
	return ack, nil
}

// injectTrace puts the span context of ctx, if any, into a task message's
// headers (OpenTelemetry's, W3C form), for the worker's attempt span to
// continue the producer's.
func injectTrace(ctx context.Context, msg *nats.Msg) {
	tracing.Inject(ctx, msg.Header)
}
