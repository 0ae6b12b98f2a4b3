// Package taskstore holds every read and write of a task's records, for
// every role; the role types of package stream decide, and this package
// speaks JetStream for them, in domain types.
//
//   - Store: what the worker that executes a delivery reads and writes of
//     its task: the state of a generation (GenState, read with LoadGen), its
//     records written by compare-and-set (every write expects the last
//     sequence over the task's records, so whether a generation already has
//     its outcome is decided by compare-and-set, never by message-id
//     deduplication), its token in the token stream, its cancel, and the
//     dead letter a replay names. JetStream implements it on the streams.
//   - Reader: what producers and admins read, without a consumer: scans of
//     the stream's records from a sequence or a time, followed as they are
//     stored (Scan, yielding Records), and single reads (a task's latest
//     generation and its last task message, the replay chain, a token, a
//     workers' consumer's queue).
//   - Writer: what producers and admins write: task messages under their id
//     (pipelined or retried), cancel and replay records, and the erasure of
//     dead letters.
package taskstore
