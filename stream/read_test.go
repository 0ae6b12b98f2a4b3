package stream

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/taskstore"
)

// scanFrom reads the messages of subjects from startSeq as c's reads do
// (taskstore.Reader), each as the broker's client gives it.
func scanFrom(ctx context.Context, c *Client, subjects []string, startSeq uint64, follow bool, fn func(jetstream.Msg) (stop bool, err error)) error {
	return c.rd.Msgs(ctx, taskstore.ScanOpts{Subjects: subjects, StartSeq: startSeq, Follow: follow}, fn)
}
