package main

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
)

// An in-process connect whose handshake met the server's first PING before
// its PONG is made again; any other failure is not, and the race is given
// up on after four tries.
func TestConnectPastFirstPing(t *testing.T) {
	race := errors.New("nats: expected 'PONG', got 'PING'")
	cases := []struct {
		name      string
		failures  int
		err       error
		wantCalls int
		wantErr   bool
	}{
		{"race twice", 2, race, 3, false},
		{"race always", 10, race, 4, true},
		{"wrong password", 10, nats.ErrAuthorization, 1, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			_, err := connectPastFirstPing(func() (*nats.Conn, error) {
				calls++
				if calls <= c.failures {
					return nil, c.err
				}
				return nil, nil
			})
			if calls != c.wantCalls || (err != nil) != c.wantErr {
				t.Fatalf("%d calls, error %v; want %d calls, error %v", calls, err, c.wantCalls, c.wantErr)
			}
			if c.wantErr && !errors.Is(err, c.err) {
				t.Fatalf("error %v, want the last attempt's %v", err, c.err)
			}
		})
	}
}
