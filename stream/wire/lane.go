package wire

import "github.com/captchaq/captchaq/captcha"

// Lane groups methods by how long they take, so that a backlog of slow ones
// never starves fast ones. The lane is part of a task's subject.
type Lane string

const (
	// LaneSlow holds reCAPTCHA v2 (also invisible, enterprise), GeeTest (v3
	// and v4), hCaptcha and Cloudflare challenges: 15–60 s solves, whose
	// first poll CaptchaAI's examples wait 15–20 s for.
	LaneSlow = Lane(captcha.LaneSlow)
	// LaneFast holds Turnstile, reCAPTCHA v3, images, grids and BLS: 2–15 s
	// solves.
	LaneFast = Lane(captcha.LaneFast)
)

// Lanes lists every lane, in the order workers look at them. Callers must
// not modify it.
var Lanes = []Lane{LaneFast, LaneSlow}

// LaneOf returns the lane a task of this method and parameters travels in:
// its kind's in the method catalogue (captcha.LaneOf), LaneFast for a
// method the catalogue does not know.
func LaneOf(method string, params Params) Lane {
	return Lane(captcha.LaneOf(method, params))
}
