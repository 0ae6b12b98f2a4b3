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

// EnsureTimings creates TimingsBucket of t if it does not exist (or
// brings its configuration to t's), and returns it.
func EnsureTimings(ctx context.Context, js jetstream.JetStream, t Spec) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
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
