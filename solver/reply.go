package solver

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

// reply is one successful API answer: status 1 in JSON, OK|… in plain text.
type reply struct {
	// value is the "request" field as JSON: a string, a number or an object.
	// For plain-text replies it is the text after "OK|" as a JSON string.
	value json.RawMessage
	// text is the request as text: the string's contents, the number's digits,
	// or for an object its JSON.
	text string
	// userAgent is the "useragent" field (Turnstile) or the "user_agent"
	// field (cloudflare_challenge), if any.
	userAgent string
	// errorText is the "error_text" of a status 0 reply: set only beside
	// an API code, redacted and cut to 200 bytes.
	errorText string
}

// errBadReply is the Err of a BAD_REPLY *Error.
var errBadReply = errors.New("unexpected reply")

// parseReply turns one HTTP answer of in.php or res.php into a reply or a
// *Error whose Op is op. It accepts the JSON form ({"status":1,"request":…},
// status and id as numbers or strings) and the plain-text form (OK|…, a bare
// code). HTTP errors, HTML pages and garbage become Transient errors
// (HTTP_<status> or BAD_REPLY) that quote the start of the body, with every
// form of key (the API key; "" for none) cut out of it before anything is
// truncated, so that no part of the key reaches the message.
func parseReply(op string, status int, body []byte, key string) (reply, error) {
	r, code, err := parseBody(body, key)
	switch {
	case status != http.StatusOK && code != "":
		// An error page that still carries an API code: trust the code.
		return reply{}, newError(op, code, nil).saying(r.errorText)
	case status != http.StatusOK:
		return reply{}, newError(op, HTTPCode(status), fmt.Errorf("HTTP %d %s: %s", status, http.StatusText(status), describe(body, key)))
	case err != nil:
		return reply{}, newError(op, CodeBadReply, err).replyLost()
	case code != "":
		return reply{}, newError(op, code, nil).saying(r.errorText)
	}
	return r, nil
}

// parseBody parses a reply body. Exactly one of: a reply (code == "" and err
// == nil), an API code, or an error saying why the body is not a reply, which
// never quotes key.
func parseBody(body []byte, key string) (r reply, code string, err error) {
	b := bytes.TrimSpace(body)
	if len(b) == 0 {
		return reply{}, "", fmt.Errorf("%w: empty body", errBadReply)
	}
	if b[0] == '{' {
		return parseJSON(b, key)
	}
	if rest, ok := bytes.CutPrefix(b, []byte(classic.OKPrefix)); ok {
		if !utf8.Valid(rest) {
			return reply{}, "", fmt.Errorf("%w: %s", errBadReply, describe(body, key))
		}
		v, _ := json.Marshal(string(rest))
		return reply{value: v, text: string(rest)}, "", nil
	}
	if classic.IsCode(string(b)) {
		return reply{}, string(b), nil
	}
	return reply{}, "", fmt.Errorf("%w: %s", errBadReply, describe(body, key))
}

func parseJSON(b []byte, key string) (reply, string, error) {
	var j classic.JSONReply
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&j); err != nil {
		return reply{}, "", fmt.Errorf("%w: invalid JSON (%v): %s", errBadReply, err, describe(b, key))
	}
	if dec.More() {
		return reply{}, "", fmt.Errorf("%w: trailing data after JSON: %s", errBadReply, describe(b, key))
	}
	var st string
	switch s := string(bytes.TrimSpace(j.Status)); s {
	case "1", `"1"`, "true":
		st = "1"
	case "0", `"0"`, "false":
		st = "0"
	default:
		return reply{}, "", fmt.Errorf("%w: status %s is neither 0 nor 1: %s", errBadReply, statusText(s, key), describe(b, key))
	}
	req := bytes.TrimSpace(j.Request)
	if len(req) == 0 || string(req) == "null" {
		return reply{}, "", fmt.Errorf("%w: no request field: %s", errBadReply, describe(b, key))
	}
	if st == "0" {
		var code string
		if json.Unmarshal(req, &code) != nil || !classic.IsCode(code) {
			return reply{}, "", fmt.Errorf("%w: status 0 without an error code: %s", errBadReply, describe(b, key))
		}
		return reply{errorText: truncate(strings.ToValidUTF8(redact(j.ErrorText, key), "\uFFFD"), 200)}, code, nil
	}
	r := reply{value: append(json.RawMessage(nil), req...), userAgent: cmp.Or(j.UserAgent, j.UserAgentCF)}
	switch req[0] {
	case '"':
		if err := json.Unmarshal(req, &r.text); err != nil {
			return reply{}, "", fmt.Errorf("%w: bad request string: %s", errBadReply, describe(b, key))
		}
	case '{':
		var c bytes.Buffer
		if err := json.Compact(&c, req); err != nil {
			return reply{}, "", fmt.Errorf("%w: bad request object: %s", errBadReply, describe(b, key))
		}
		r.value, r.text = c.Bytes(), c.String()
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		r.text = string(req) // an id or a numeric answer sent as a JSON number
		r.value, _ = json.Marshal(r.text)
	default:
		return reply{}, "", fmt.Errorf("%w: request is neither a string, a number nor an object: %s", errBadReply, describe(b, key))
	}
	return r, "", nil
}

// describe names what a body that is not a reply looks like, quoting its
// start so a log reader can tell an HTML error page from a truncated reply.
// Every form of key is replaced by [REDACTED] first: cutting the quote short
// after that cannot leave a piece of the key that no longer matches it.
func describe(body []byte, key string) string {
	b := bytes.TrimSpace(redactBytes(body, key))
	kind := "body"
	if len(b) > 0 && b[0] == '<' {
		kind = "HTML page"
		if t := htmlTitle(b); t != "" {
			kind += " " + strconv.Quote(t)
		}
	}
	const max = 80
	q := b
	if len(q) > max {
		q = q[:max]
	}
	s := strconv.Quote(string(bytes.ToValidUTF8(q, []byte("\uFFFD"))))
	if len(b) > max {
		s += "…"
	}
	return fmt.Sprintf("%s of %d bytes: %s", kind, len(body), s)
}

// htmlTitle returns the text of the first <title> element, if short.
func htmlTitle(b []byte) string {
	lower := asciiLower(b) // same length as b, unlike bytes.ToLower
	i := bytes.Index(lower, []byte("<title>"))
	if i < 0 {
		return ""
	}
	start := i + len("<title>")
	j := bytes.Index(lower[start:], []byte("</title>"))
	if j < 0 || j > 120 {
		return ""
	}
	return string(bytes.ToValidUTF8(bytes.TrimSpace(b[start:start+j]), []byte("\uFFFD")))
}

// asciiLower lower-cases the ASCII letters of b into a new slice of the same
// length.
func asciiLower(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

// statusText shows the raw JSON of a status field that is neither 0 nor 1:
// short ones as they are (less any form of key), long ones by their length
// only, since quoting part of one could quote part of a key.
func statusText(s, key string) string {
	switch {
	case s == "":
		return "(missing)"
	case len(s) > 24:
		return fmt.Sprintf("(a value of %d bytes)", len(s))
	}
	return redact(s, key)
}
