package solver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Text returns the solution as text: the token of reCAPTCHA and Turnstile,
// the text of an image, the click:… of a grid. It fails for an object
// (GeeTest).
func (a Answer) Text() (string, error) {
	var s string
	if err := json.Unmarshal(a.Solution, &s); err != nil {
		return "", fmt.Errorf("solver: solution is not text: %w", err)
	}
	return s, nil
}

// Clicks returns the cells of a grid answer, "click:1/4/7" or "1,4,7" (the
// two forms CaptchaAI documents, CaptchaAI-Examples,
// articles/how-to-solve-grid-image-captcha-automatically/README.md), 1-based,
// left to right, top to bottom. An answer without clicks ("click:" or
// "No_matching_images") gives an empty slice.
func (a Answer) Clicks() ([]int, error) {
	s, err := a.Text()
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(s, "No_matching_images") {
		return []int{}, nil
	}
	rest, sep := s, ","
	if r, ok := strings.CutPrefix(s, "click:"); ok {
		rest, sep = r, "/"
	} else if strings.Trim(s, "0123456789,") != "" || s == "" {
		return nil, fmt.Errorf("solver: grid answer %q is neither click:1/4/7 nor 1,4,7", truncate(s, 32))
	}
	out := []int{}
	if rest == "" {
		return out, nil
	}
	for _, f := range strings.Split(rest, sep) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("solver: grid answer %q: bad cell %q", truncate(s, 32), f)
		}
		out = append(out, n)
	}
	return out, nil
}

// GeeTestAnswer is the answer to a GeeTest v3 captcha, with the field names
// the service answers with (CaptchaAI-Examples,
// articles/how-to-solve-geetest-v3-using-api/README.md), which are also the
// form fields a page posts. Every field is non-empty in an answer the service
// returns without error.
type GeeTestAnswer struct {
	// Challenge is the geetest_challenge to submit with the form.
	Challenge string `json:"geetest_challenge"`
	// Validate is the geetest_validate to submit with the form.
	Validate string `json:"geetest_validate"`
	// Seccode is the geetest_seccode to submit with the form.
	Seccode string `json:"geetest_seccode"`
}

// GeeTest returns the solution as a GeeTest v3 answer. It fails when the
// solution is not an object or lacks one of its three fields.
func (a Answer) GeeTest() (GeeTestAnswer, error) {
	f, err := objectFields(a.Solution, "GeeTest v3", "geetest_challenge", "geetest_validate", "geetest_seccode")
	if err != nil {
		return GeeTestAnswer{}, err
	}
	return GeeTestAnswer{Challenge: f[0], Validate: f[1], Seccode: f[2]}, nil
}

// GeeTestV4Answer is the answer to a GeeTest v4 captcha (method geetest with
// version=4), with the service's field names (CaptchaAI-Examples,
// articles/how-to-solve-geetest-v4-using-api/README.md). Every field is
// non-empty in an answer the service returns without error.
type GeeTestV4Answer struct {
	// CaptchaID is the captcha_id, the task's gt.
	CaptchaID string `json:"captcha_id"`
	// LotNumber is the lot_number of this solve.
	LotNumber string `json:"lot_number"`
	// PassToken is the pass_token.
	PassToken string `json:"pass_token"`
	// GenTime is the gen_time, a Unix time in seconds as text.
	GenTime string `json:"gen_time"`
	// CaptchaOutput is the captcha_output.
	CaptchaOutput string `json:"captcha_output"`
}

// GeeTestV4 returns the solution as a GeeTest v4 answer. It fails when the
// solution is not an object or lacks one of its five fields; gen_time may be
// a JSON number or a string.
func (a Answer) GeeTestV4() (GeeTestV4Answer, error) {
	f, err := objectFields(a.Solution, "GeeTest v4", "captcha_id", "lot_number", "pass_token", "gen_time", "captcha_output")
	if err != nil {
		return GeeTestV4Answer{}, err
	}
	return GeeTestV4Answer{CaptchaID: f[0], LotNumber: f[1], PassToken: f[2], GenTime: f[3], CaptchaOutput: f[4]}, nil
}

// CloudflareAnswer is the answer to a cloudflare_challenge: the cf_clearance
// cookie's value and the user agent it was earned with. Both must be reused,
// from the task's proxy IP, on every later request to the site.
type CloudflareAnswer struct {
	// Clearance is the value of the cf_clearance cookie.
	Clearance string
	// UserAgent is the User-Agent header to send with it.
	UserAgent string
}

// Cloudflare returns the solution of a cloudflare_challenge: the cookie value
// (the service's request field) and the user agent (its user_agent field).
// It fails when either is missing, since the cookie is useless without it.
func (a Answer) Cloudflare() (CloudflareAnswer, error) {
	c, err := a.Text()
	if err != nil {
		return CloudflareAnswer{}, err
	}
	if c == "" || a.UserAgent == "" {
		return CloudflareAnswer{}, fmt.Errorf("solver: Cloudflare answer lacks the cf_clearance value or the user agent")
	}
	return CloudflareAnswer{Clearance: c, UserAgent: a.UserAgent}, nil
}

// Cells returns the cells of a BLS answer "1,3,5" (1-based, as the service
// numbers them). An empty answer gives an empty slice.
func (a Answer) Cells() ([]int, error) {
	s, err := a.Text()
	if err != nil {
		return nil, err
	}
	out := []int{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("solver: BLS answer %q: bad cell %q", truncate(s, 32), f)
		}
		out = append(out, n)
	}
	return out, nil
}

// objectFields reads the named fields of a JSON object as text (strings, or
// numbers by their digits), failing when one is missing or empty.
func objectFields(sol json.RawMessage, what string, names ...string) ([]string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(sol, &m); err != nil {
		return nil, fmt.Errorf("solver: solution is not a %s answer: %w", what, err)
	}
	out := make([]string, len(names))
	var missing []string
	for i, n := range names {
		v := bytes.TrimSpace(m[n])
		var s string
		switch {
		case len(v) > 0 && v[0] == '"':
			_ = json.Unmarshal(v, &s)
		case len(v) > 0 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9'):
			s = string(v)
		}
		if s == "" {
			missing = append(missing, n)
		}
		out[i] = s
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("solver: %s answer lacks %s", what, strings.Join(missing, ", "))
	}
	return out, nil
}
