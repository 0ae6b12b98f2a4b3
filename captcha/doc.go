// Package captcha is the catalogue of the methods captchaq solves: one entry
// per method with its parameters and their checks, its kinds, lane, token
// lifetime, first poll and longest wait, whether a batch poll serves it, the
// shape of its answer and the user agent it is bound to; and Validate, which
// checks a request against it. It imports only the standard library, so the
// wire contract (stream/wire) links no HTTP client through it.
//
// Adding a method means adding an entry to catalogue (methods.go) and a
// fixture to the emulator (solver/fakeapi).
package captcha
