package main

import (
	"errors"
	"fmt"
	"syscall"
)

// portTaken adds to an error from listening on a port something else holds
// what to do about it: the flag that moves the listener, and that port 0
// picks a free one (the command then names the address it got). Any other
// error is returned as it is.
func portTaken(err error, flag, gotAddr string) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	return fmt.Errorf("%w: something else holds that port; %s 127.0.0.1:0 picks a free one (%s)", err, flag, gotAddr)
}
