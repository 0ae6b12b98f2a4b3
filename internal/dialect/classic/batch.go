package classic

import (
	"net/http"
	"strings"
)

// A batch poll, res.php action=get&ids=<id>,<id>,… with at most MaxBatchIDs
// ids, answers each captcha's state in the order asked (its answer's text,
// CAPCHA_NOT_READY or an error code), joined by StateSep: bare in plain
// text, the request string of status 1 under json=1 (2captcha's res.php
// with ids, which CaptchaAI's follows; the emulator answers the same).
const (
	MaxBatchIDs = 100
	StateSep    = "|"
)

// WriteStates answers a batch poll with states, in the order asked.
func WriteStates(w http.ResponseWriter, jsonOut bool, states []string) {
	WriteBare(w, jsonOut, strings.Join(states, StateSep))
}
