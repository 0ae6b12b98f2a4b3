// Package jscall is how package stream and its machinery call JetStream:
// every call retried on the same passing faults (Passing) and paced by the
// same backoff (Backoff), requests sent again until answered
// (UntilAnswered), publishes retried with their options (PublishRetrying),
// the records of one task read one direct get each (Walk), and batched
// direct gets without a consumer (DirectReader, Scan).
package jscall
