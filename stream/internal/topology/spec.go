package topology

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/wire"
)

// Spec is a topology with its defaults applied, as the broker objects are
// made from it: what stream.Topology's fields say, resolved (stream.Topology
// documents each field and its default).
type Spec struct {
	Stream          string
	Replicas        int
	Retention       time.Duration
	MaxBytes        int64 // 0: bounded by Retention alone
	TokenMaxBytes   int64 // 0: DefaultTokenMaxBytes
	DuplicateWindow time.Duration
	AckWait         time.Duration
	LaneLimits      map[wire.Lane]int
	MaxInFlight     int
	Memory          bool
	Domain          string
	// MaxPayload is the server's max_payload, which sets the stream's
	// MaxMsgSize (wire.MaxTaskMessage); 0: Ensure reads it from the
	// connection.
	MaxPayload int64
}

// Storage is where the streams keep their messages: on disk, in memory with
// Memory.
func (t Spec) Storage() jetstream.StorageType {
	if t.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}
