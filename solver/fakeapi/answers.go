package fakeapi

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
)

// defaultUserAgent is the user agent of Turnstile answers to tasks that name
// none.
const defaultUserAgent = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/138.0.0.0 Safari/537.36"

// answer makes a random-looking answer unique to c. Callers hold s.mu.
func (s *Server) answer(c *captcha) (json.RawMessage, string) {
	str := func(v string) json.RawMessage { b, _ := json.Marshal(v); return b }
	switch c.kind {
	case KindRecaptcha, KindRecaptchaV3:
		return str("03A" + s.token(c.id, 300)), ""
	case KindTurnstile:
		ua := c.params["userAgent"]
		if ua == "" {
			ua = defaultUserAgent
		}
		return str("0." + s.token(c.id, 240)), ua
	case KindGeeTest:
		// The service's field names (CaptchaAI-Examples,
		// articles/how-to-solve-geetest-v3-using-api/README.md).
		validate := s.hex(32)
		obj, _ := json.Marshal(map[string]string{
			"geetest_challenge": c.params["challenge"],
			"geetest_validate":  validate,
			"geetest_seccode":   validate + "|jordan",
		})
		if s.cfg.GeeTestAsString {
			return str(string(obj)), ""
		}
		return obj, ""
	case KindGeeTestV4:
		// CaptchaAI-Examples, articles/how-to-solve-geetest-v4-using-api/.
		obj, _ := json.Marshal(map[string]string{
			"captcha_id":     c.params["gt"],
			"lot_number":     s.hex(32),
			"pass_token":     s.hex(64),
			"gen_time":       strconv.FormatInt(s.now().Unix(), 10),
			"captcha_output": s.token(c.id, 120),
		})
		if s.cfg.GeeTestAsString {
			return str(string(obj)), ""
		}
		return obj, ""
	case KindHCaptcha:
		return str("P1_" + s.token(c.id, 400)), ""
	case KindFriendly:
		// A token string (anti-captcha.com/apidoc/task-types/
		// FriendlyCaptchaTaskProxyless: solution.token).
		return str(s.token(c.id, 240)), ""
	case KindCloudflare:
		ua := c.params["userAgent"]
		if ua == "" {
			ua = defaultUserAgent
		}
		return str(s.token(c.id, 43) + "-" + strconv.FormatInt(s.now().Unix(), 10) + "-1.2.1.1-" + s.token(c.id, 60)), ua
	case KindBLS:
		// Cells of a 3×3 grid, "1,3,5" (CaptchaAI-Examples,
		// articles/how-to-solve-bls-captcha-step-by-step/README.md).
		var cells []string
		for i := 1; i <= 9; i++ {
			if s.rng.IntN(3) == 0 {
				cells = append(cells, strconv.Itoa(i))
			}
		}
		if len(cells) == 0 {
			cells = append(cells, strconv.Itoa(1+s.rng.IntN(9)))
		}
		return str(strings.Join(cells, ",")), ""
	case KindGrid:
		n := 1 + s.rng.IntN(4)
		cells := make([]string, 0, n)
		last := 0
		for range n {
			last += 1 + s.rng.IntN(2)
			if last > 9 {
				break
			}
			cells = append(cells, strconv.Itoa(last))
		}
		if len(cells) == 0 {
			cells = append(cells, "1")
		}
		return str("click:" + strings.Join(cells, "/")), ""
	}
	// Text of an image: numeric=1 digits only.
	alphabet := "abcdefghjkmnpqrstuvwxyz23456789"
	if c.params["numeric"] == "1" {
		alphabet = "0123456789"
	}
	b := make([]byte, 5+s.rng.IntN(3))
	for i := range b {
		b[i] = alphabet[s.rng.IntN(len(alphabet))]
	}
	return str(string(b)), ""
}

// token returns n random URL-safe characters that embed id, so no two
// captchas share a token. Callers hold s.mu.
func (s *Server) token(id string, n int) string {
	raw := make([]byte, n*3/4+1)
	for i := range raw {
		raw[i] = byte(s.rng.Uint32())
	}
	t := base64.RawURLEncoding.EncodeToString(raw)
	mark := base64.RawURLEncoding.EncodeToString([]byte(id))
	pos := 20
	return (t[:pos] + mark + t[pos:])[:n]
}

func (s *Server) hex(n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[s.rng.IntN(16)]
	}
	return string(b)
}
