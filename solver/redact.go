package solver

import (
	"bytes"
	"encoding/json"
	"html"
	"net/url"
	"slices"
	"strings"
)

// redacted replaces the API key wherever it would otherwise be shown.
const redacted = "[REDACTED]"

// keyForms returns the spellings of key a reply may echo it in: as is,
// URL-encoded (query and path escaping: the key travels in a form body),
// JSON-escaped (with and without Go's HTML escaping) and HTML-escaped; the
// longest first, so that a longer form is cut out before a shorter one it
// contains. It returns nil for an empty key.
func keyForms(key string) []string {
	if key == "" {
		return nil
	}
	forms := []string{key, url.QueryEscape(key), url.PathEscape(key), html.EscapeString(key)}
	if j, err := json.Marshal(key); err == nil {
		forms = append(forms, string(j[1:len(j)-1]))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(key) == nil {
		j := bytes.TrimSpace(buf.Bytes())
		forms = append(forms, string(j[1:len(j)-1]))
	}
	slices.SortFunc(forms, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(forms)
}

// Redact returns s with every spelling of key a reply may echo it in (as
// is, URL-, JSON- or HTML-escaped) replaced by [REDACTED]: for a client of
// another dialect, whose errors carry what its service said.
func Redact(s, key string) string { return redact(s, key) }

// redact replaces every form of key in s (see keyForms) by [REDACTED].
// Callers must redact a text before they truncate it: a key cut in two by
// truncation no longer matches, and its first half would be shown.
func redact(s, key string) string {
	for _, f := range keyForms(key) {
		s = strings.ReplaceAll(s, f, redacted)
	}
	return s
}

// redactBytes is redact for a body. It returns b itself when no form of key
// is in it.
func redactBytes(b []byte, key string) []byte {
	for _, f := range keyForms(key) {
		if bytes.Contains(b, []byte(f)) {
			b = bytes.ReplaceAll(b, []byte(f), []byte(redacted))
		}
	}
	return b
}
