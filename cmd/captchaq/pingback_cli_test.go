package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPingbackFlags: the callback flags go together and want an http(s) URL,
// with either profile.
func TestPingbackFlags(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]string{
		"worker --pingback-listen 127.0.0.1:0":                                                      "--pingback-listen and --pingback-url go together",
		"worker --pingback-listen 127.0.0.1:0 --pingback-url ftp://cb.example/x":                    "--pingback-url",
		"worker --service 2captcha --pingback-listen 127.0.0.1:0 --pingback-url ftp://cb.example/x": "--pingback-url",
	} {
		r := runInProcess(strings.Fields(args)...)
		require.Equal(t, 2, r.code, args)
		require.Contains(t, r.stderr, want, args)
	}
}
