// Package taskstore holds what the CAPTCHA stream keeps of one task for
// the worker that executes a delivery of it: the state of a generation
// (GenState, read with LoadGen), its records written by compare-and-set
// (every write expects the last sequence over the task's records, so
// whether a generation already has its outcome is decided by
// compare-and-set, never by message-id deduplication), its token in the
// token stream, its cancel, and the dead letter a replay names. Store is
// that as an interface; JetStream implements it on the streams.
package taskstore
