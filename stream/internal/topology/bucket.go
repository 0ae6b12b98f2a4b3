// The timings bucket: the key-value bucket a worker pool shares (package
// pool reads and writes it).

package topology

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TimingsBucket is the name of the pool's key-value bucket
// (stream.TimingsBucket says what it holds).
const TimingsBucket = "captchaq-timings"

// TimingsMaxValue bounds one value: a Learned is under 100 bytes, the plan
// windows about 80 bytes a worker.
const TimingsMaxValue = 64 * 1024

// ClaimMarkerTTL is how long a released claim's marker stays in the
// bucket (pool.Claims).
const ClaimMarkerTTL = time.Minute

// TimingsMetaFollower, in TimingsBucket's metadata, says that a server
// follows the plan the service tells the workers and sets the plan-wide
// quota from it (stream.Admin.FollowServicePlan, MarkPlanFollower): a
// worker told a plan waits for that quota before its first task. Its value
// is when the server last said so (RFC 3339, the broker's clock as the
// server reads it; the workers judge it on theirs): it says
// so every PlanFollowerEvery, and a mark older than PlanFollowerFresh is
// a server gone (killed, or the pool moved to a plain nats-server), which
// no worker waits for.
const TimingsMetaFollower = "captchaq.plan_follower"

// PlanFollowerEvery is how often a following server renews its mark
// (TimingsMetaFollower); PlanFollowerFresh how long a mark counts.
const (
	PlanFollowerEvery = time.Minute
	PlanFollowerFresh = 3 * PlanFollowerEvery
)

// PlanFollowerMarked reports whether mark (TimingsMetaFollower's value)
// says a server followed within PlanFollowerFresh of now. A mark of the
// first release ("true") has no time, and counts as gone.
func PlanFollowerMarked(mark string, now time.Time) bool {
	at, err := time.Parse(time.RFC3339Nano, mark)
	return err == nil && now.Sub(at) < PlanFollowerFresh
}

// EnsureTimings creates TimingsBucket of t if it does not exist (or
// brings its configuration to t's, keeping TimingsMetaFollower), and
// returns it.
func EnsureTimings(ctx context.Context, js jetstream.JetStream, t Spec) (jetstream.KeyValue, error) {
	var meta map[string]string
	if s, err := js.Stream(ctx, timingsStream); err == nil {
		if v := s.CachedInfo().Config.Metadata[TimingsMetaFollower]; v != "" {
			meta = map[string]string{TimingsMetaFollower: v}
		}
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Metadata:     meta,
		Bucket:       TimingsBucket,
		Description:  "captchaq: the solving service's ready times learned by the workers, by captcha kind",
		MaxValueSize: TimingsMaxValue,
		History:      1,
		// Keys may expire (the captcha claims, stream.ClaimTTL): a
		// released claim's marker goes after ClaimMarkerTTL.
		LimitMarkerTTL: ClaimMarkerTTL,
		Storage:        t.Storage(),
		Replicas:       t.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("timings bucket %s: %w", TimingsBucket, err)
	}
	return kv, nil
}

// timingsStream is TimingsBucket's stream.
const timingsStream = "KV_" + TimingsBucket

// MarkPlanFollower records in TimingsBucket's metadata that a server
// follows the plan the service tells the workers, at now, a time of the
// broker's clock (TimingsMetaFollower).
// It needs an admin's rights (the stream's update), as the bucket's
// creation does.
func MarkPlanFollower(ctx context.Context, js jetstream.JetStream, now time.Time) error {
	s, err := js.Stream(ctx, timingsStream)
	if err != nil {
		return fmt.Errorf("timings bucket %s: %w", TimingsBucket, err)
	}
	cfg := s.CachedInfo().Config
	meta := map[string]string{}
	for k, v := range cfg.Metadata {
		meta[k] = v
	}
	meta[TimingsMetaFollower] = now.UTC().Format(time.RFC3339Nano)
	cfg.Metadata = meta
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("timings bucket %s: %w", TimingsBucket, err)
	}
	return nil
}

// TimingsKeySubject is the subject of key in TimingsBucket's stream.
func TimingsKeySubject(key string) string { return "$KV." + TimingsBucket + "." + key }

// FollowKey calls follow with each value of key in TimingsBucket, and
// when the broker stored it (its clock), from the one stored now on,
// until ctx ends: an ordered pull consumer, no acks and no flow control,
// so that an admin's rights (the JetStream API and its inboxes) suffice,
// with no subscription to the bucket's subjects.
func FollowKey(ctx context.Context, js jetstream.JetStream, key string, follow func(value []byte, stored time.Time)) error {
	c, err := js.OrderedConsumer(ctx, timingsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{TimingsKeySubject(key)},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return fmt.Errorf("timings bucket %s: follow %s: %w", TimingsBucket, key, err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		op := m.Headers().Get("KV-Operation")
		md, err := m.Metadata()
		if op == "" && len(m.Data()) > 0 && err == nil {
			follow(m.Data(), md.Timestamp)
		}
	})
	if err != nil {
		return fmt.Errorf("timings bucket %s: follow %s: %w", TimingsBucket, key, err)
	}
	go func() {
		<-ctx.Done()
		cc.Stop()
	}()
	return nil
}
