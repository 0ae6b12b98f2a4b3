package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/wire"
)

// readToken reads the token of generation gen of task id from the token
// stream tokens: the solved outcome with its solution, and whether it is
// there (it is not once expired, or after a broker restart).
func readToken(ctx context.Context, tokens jetstream.Stream, id string, gen uint64) (Outcome, bool, error) {
	m, err := tokens.GetLastMsgForSubject(ctx, wire.TokenSubject(id, gen))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Outcome{}, false, nil
	}
	if err != nil {
		return Outcome{}, false, fmt.Errorf("read the token of task %s: %w", id, err)
	}
	var out Outcome
	if err := json.Unmarshal(m.Data, &out); err != nil {
		return Outcome{}, false, fmt.Errorf("token of task %s: %w", id, err)
	}
	return out, true, nil
}
