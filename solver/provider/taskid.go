package provider

import (
	"encoding/json"
	"strings"
)

// A JSON provider's taskId: a 64-bit number (Anti-Captcha, CapMonster Cloud,
// 2captcha API v2) or a string (CapSolver), kept as text and sent back in
// the form the provider gave it.

// maxTaskID bounds the length of a taskId the client takes: it is kept
// in the task's events and shown by trace.
const maxTaskID = 128

// taskIDText is a reply's taskId as text, and whether it is one: a whole
// number above 0 (Anti-Captcha's, CapMonster's, 2captcha's; any length, as
// the client only sends it back) or a string of letters, digits and
// '-', '_', '.' (CapSolver's), at most maxTaskID long.
func taskIDText(raw json.RawMessage) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		s = string(raw)
		if s == "" || s[0] < '1' || s[0] > '9' || strings.Trim(s, "0123456789") != "" {
			return "", false
		}
	}
	return s, validTaskID(s)
}

// validTaskID reports whether id is a taskId the client sends back (see
// taskIDText).
func validTaskID(id string) bool {
	if id == "" || len(id) > maxTaskID || strings.Trim(id, "0") == "" {
		return false
	}
	for _, r := range id {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// wireTaskID is id as the provider gave it: a number when it is digits
// only, else a string (CapSolver's). A string of digits a provider gave
// goes back as a number: Accepted keeps the text only.
func wireTaskID(id string) json.RawMessage {
	if strings.Trim(id, "0123456789") == "" && id != "" && id[0] != '0' {
		return json.RawMessage(id)
	}
	b, _ := json.Marshal(id)
	return b
}
