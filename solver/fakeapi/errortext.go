package fakeapi

import "github.com/captchaq/captchaq/internal/dialect/classic"

// errorText is the error_text the emulator sends beside code in json=1
// replies, as the services do ({"status":0,"request":"ERROR_…",
// "error_text":"…"}): the service's description (classic.Text), or a
// generic text for a code the table does not hold.
func errorText(code string) string {
	if t := classic.Text(code); t != "" {
		return t
	}
	return "The request failed: " + code + "."
}
