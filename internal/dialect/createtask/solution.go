package createtask

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/captchaq/captchaq/captcha"
)

// The solution shapes (getTaskResult's solution), by what the task asked
// for:
//   - reCAPTCHA: gRecaptchaResponse (Anti-Captcha index.js returns
//     solution.gRecaptchaResponse; CapMonster RecaptchaResponseBase.ts);
//   - hCaptcha: gRecaptchaResponse and userAgent (index.js
//     solveHCaptcha*: gRecaptchaResponse, userAgent, respKey;
//     CapMonster HCaptchaResponse.ts);
//   - Turnstile: token (index.js solveTurnstile*; CapMonster
//     TurnstileResponse.ts) and the userAgent it is bound to (CapSolver's
//     getTaskResult example carries userAgent beside the answer);
//   - GeeTest v3: challenge, validate, seccode; v4: captcha_id, lot_number,
//     pass_token, gen_time, captcha_output (CapMonster GeeTestResponse.ts);
//   - Friendly Captcha: token and the worker's userAgent
//     (anti-captcha.com/apidoc/task-types/FriendlyCaptchaTaskProxyless;
//     CapSolver's docs.capsolver.com/guide/captcha/FriendlyCaptcha: token);
//   - an image: text (index.js solveImage; CapMonster ImageToTextResponse.ts).
//
// captchaq's answers (stream.Outcome.Solution) are a JSON string for
// tokens and text and an object for GeeTest, whose v3 fields carry the
// geetest_ prefix (CaptchaAI-Examples, articles/how-to-solve-geetest-v3-
// using-api/README.md); a GeeTest object may come as a string holding it.

// textField is the solution field holding a method's answer when the
// answer is a string.
var textField = map[string]string{captcha.MethodReCaptcha: "gRecaptchaResponse", captcha.MethodHCaptcha: "gRecaptchaResponse", captcha.MethodTurnstile: "token",
	captcha.MethodFriendly: "token", captcha.MethodPost: "text", captcha.MethodBase64: "text", captcha.MethodBLS: "text"}

// ErrNoSolutionShape is Solution's error for a method the dialect has no
// task type, and so no solution shape, for (cloudflare_challenge).
var ErrNoSolutionShape = errors.New("no solution shape in the JSON dialect")

// Solution is the solution object of captchaq's answer to a request of
// method (its value as stream.Outcome.Solution holds it, and the user agent
// the answer is bound to, or "").
func Solution(method string, answer json.RawMessage, userAgent string) (json.RawMessage, error) {
	var out map[string]string
	field, isText := textField[method]
	switch {
	case isText:
		tok, err := text(answer)
		if err != nil {
			return nil, err
		}
		out = map[string]string{field: tok}
	case method == captcha.MethodGeeTest:
		obj, err := object(answer)
		if err != nil {
			return nil, err
		}
		out = obj
		if _, v3 := obj["geetest_challenge"]; v3 {
			out = map[string]string{"challenge": obj["geetest_challenge"], "validate": obj["geetest_validate"], "seccode": obj["geetest_seccode"]}
		}
	default:
		return nil, fmt.Errorf("method %q: %w", method, ErrNoSolutionShape)
	}
	if userAgent != "" {
		out["userAgent"] = userAgent
	}
	return json.Marshal(out)
}

// Answer is the inverse of Solution: captchaq's answer and user agent from
// a solution object of a task of kind k.
func Answer(k Kind, solution json.RawMessage) (json.RawMessage, string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(solution, &obj); err != nil {
		return nil, "", fmt.Errorf("solution: want an object: %w", err)
	}
	var ua string
	if raw, ok := obj["userAgent"]; ok {
		_ = json.Unmarshal(raw, &ua)
	}
	pick := func(field string) (json.RawMessage, string, error) {
		raw, ok := obj[field]
		if _, err := text(raw); !ok || err != nil {
			return nil, "", fmt.Errorf("solution.%s: want a string", field)
		}
		return raw, ua, nil
	}
	switch k {
	case KindRecaptchaV2, KindRecaptchaV2Enterprise, KindRecaptchaV3, KindHCaptcha:
		return pick("gRecaptchaResponse")
	case KindTurnstile, KindFriendlyCaptcha:
		return pick("token")
	case KindImage:
		return pick("text")
	case KindGeeTest:
		s := map[string]string{}
		for k, v := range obj {
			var str string
			if json.Unmarshal(v, &str) == nil && k != "userAgent" {
				s[k] = str
			}
		}
		if _, v3 := s["challenge"]; v3 {
			s = map[string]string{"geetest_challenge": s["challenge"], "geetest_validate": s["validate"], "geetest_seccode": s["seccode"]}
		}
		b, err := json.Marshal(s)
		return b, "", err
	}
	return nil, "", errors.New("solution: unknown kind")
}

func text(v json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", errors.New("answer: want a string")
	}
	return s, nil
}

func object(v json.RawMessage) (map[string]string, error) {
	var m map[string]string
	if json.Unmarshal(v, &m) == nil {
		return m, nil
	}
	s, err := text(v)
	if err == nil && json.Unmarshal([]byte(s), &m) == nil {
		return m, nil
	}
	return nil, errors.New("answer: want an object of strings")
}
