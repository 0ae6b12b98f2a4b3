package wire

// Lane groups methods by how long they take, so that a backlog of slow ones
// never starves fast ones. The lane is part of a task's subject.
type Lane string

const (
	// LaneSlow holds reCAPTCHA v2 (also invisible, enterprise), GeeTest (v3
	// and v4), hCaptcha and Cloudflare challenges: 15–60 s solves, whose
	// first poll CaptchaAI's examples wait 15–20 s for.
	LaneSlow Lane = "slow"
	// LaneFast holds Turnstile, reCAPTCHA v3, images, grids and BLS: 2–15 s
	// solves.
	LaneFast Lane = "fast"
)

// Lanes lists every lane, in the order workers look at them. Callers must
// not modify it.
var Lanes = []Lane{LaneFast, LaneSlow}

// LaneOf returns the lane a task of this method and parameters travels in:
// LaneSlow for reCAPTCHA v2, GeeTest, hCaptcha and cloudflare_challenge,
// LaneFast for everything else.
func LaneOf(method string, params Params) Lane {
	switch method {
	case "userrecaptcha":
		if params["version"] == "v3" {
			return LaneFast
		}
		return LaneSlow
	case "geetest", "hcaptcha", "cloudflare_challenge":
		return LaneSlow
	default:
		return LaneFast
	}
}
