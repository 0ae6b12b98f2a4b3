//go:build !unix

package httpguard

import "errors"

// RaiseNoFile reports that the platform has no descriptor limit to raise.
func RaiseNoFile() (soft, hard uint64, err error) {
	return 0, 0, errors.New("no RLIMIT_NOFILE on this platform")
}
