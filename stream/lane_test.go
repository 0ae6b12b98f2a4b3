package stream_test

import (
	"slices"
	"testing"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
)

// TestLaneOfEveryMethod puts every method the solver accepts in a lane: the
// 15–60 s kinds in the slow lane, the rest in the fast one. The cases are
// examples; the catalogue's own test pins each kind's lane with its source,
// so a method added there needs no case here, only a lane that exists.
func TestLaneOfEveryMethod(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method string
		params stream.Params
		want   stream.Lane
	}{
		{"userrecaptcha", nil, stream.LaneSlow},
		{"userrecaptcha", stream.Params{"version": "v3"}, stream.LaneFast},
		{"turnstile", nil, stream.LaneFast},
		{"geetest", nil, stream.LaneSlow},
		{"geetest", stream.Params{"version": "4"}, stream.LaneSlow},
		{"hcaptcha", nil, stream.LaneSlow},
		{"cloudflare_challenge", nil, stream.LaneSlow},
		{"post", nil, stream.LaneFast},
		{"base64", stream.Params{"recaptcha": "1"}, stream.LaneFast},
		{"bls", nil, stream.LaneFast},
	}
	for _, tt := range tests {
		if got := stream.LaneOf(tt.method, tt.params); got != tt.want {
			t.Errorf("LaneOf(%s, %v) = %s, want %s", tt.method, tt.params, got, tt.want)
		}
	}
	for _, m := range solver.Methods() {
		if got := stream.LaneOf(m, nil); !slices.Contains(stream.Lanes, got) {
			t.Errorf("LaneOf(%s) = %q, not a lane of the stream %v", m, got, stream.Lanes)
		}
	}
}
