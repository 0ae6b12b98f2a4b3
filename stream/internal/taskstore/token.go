package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/wire"
)

// ReadToken reads the token of generation gen of task id from the token
// stream tokens: the solved outcome with its solution, and whether it is
// there (it is not once expired, or after a broker restart).
func ReadToken(ctx context.Context, tokens jetstream.Stream, id string, gen uint64) (wire.Outcome, bool, error) {
	m, err := tokens.GetLastMsgForSubject(ctx, wire.TokenSubject(id, gen))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return wire.Outcome{}, false, nil
	}
	if err != nil {
		return wire.Outcome{}, false, fmt.Errorf("read the token of task %s: %w", id, err)
	}
	var out wire.Outcome
	if err := json.Unmarshal(m.Data, &out); err != nil {
		return wire.Outcome{}, false, fmt.Errorf("token of task %s: %w", id, err)
	}
	return out, true, nil
}
