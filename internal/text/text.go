// Package text holds the one way captchaq shortens a text for a log line, an
// error, an event or a table cell.
package text

import "unicode/utf8"

// Cut returns s when it is at most n bytes long, else its first n bytes,
// fewer if that would split a character, followed by "…". So a cut text is
// still valid UTF-8 (JSON, log lines), whatever the language of s.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
