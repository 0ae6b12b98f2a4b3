package wire

import "time"

// SubjectStoreStatus is the core NATS subject on which `captchaq server`
// (and `captchaq run`) answers requests for the state of its JetStream
// store (a StoreStatus in JSON). It is outside captcha.>, so no stream
// captures it, and answering writes nothing to the store: it works when the
// store can take no more. A server captchaq does not run answers nothing
// here (no responders).
const SubjectStoreStatus = "captchaq.store"

// StoreStatus is the state of the broker's JetStream store, as the server
// that runs it measures it. It is part of the wire contract of `captchaq
// stats --json` (field "store"): fields may be added; these keep their names
// and meaning.
type StoreStatus struct {
	// At is when it was measured.
	At time.Time `json:"at"`
	// Dir is the store's directory.
	Dir string `json:"dir"`
	// MaxStore is JetStream's storage limit of the server (the config's
	// max_file_store, by default 75 % of the disk space free at start).
	MaxStore int64 `json:"max_store"`
	// Used is what JetStream's streams hold, by its own accounting.
	Used int64 `json:"used"`
	// Free is the space free on the store's filesystem.
	Free int64 `json:"free"`
	// Room is how much more the streams may store: the least of what the
	// server's limit, the accounts' limits and the free disk space (less a
	// margin for JetStream's own files) leave. Producers keep room for the
	// records of every queued task within it.
	Room int64 `json:"room"`
	// Refusing says the store refuses writes now: a stream hit a write
	// error (a full disk latches it until JetStream reopens its files), or
	// the server's storage limit is exceeded. Error says which.
	Refusing bool   `json:"refusing"`
	Error    string `json:"error,omitempty"`
	// Action says what the operator must do, when anything; empty when the
	// server recovers by itself.
	Action string `json:"action,omitempty"`
	// Encrypted says the store is encrypted at rest: a deleted message
	// leaves nothing readable in its files, so workers need not erase
	// finished tasks' page URLs before the ack that removes them.
	Encrypted bool `json:"encrypted,omitempty"`
}
