// What the emulated account pays: a price per accepted captcha, and the
// count of captchas accepted per task, so that a task paid twice shows.

package fakeapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
)

// DefaultPricePer1000 is what 1000 captchas of a method cost when
// Config.Price does not say: an emulator's figure (see Config.Price).
const DefaultPricePer1000 = 1.0

// price is what one accepted captcha of method costs.
func (s *Server) price(method string) float64 {
	p, ok := s.cfg.Price[method]
	if !ok {
		p = DefaultPricePer1000
	}
	return p / 1000
}

// siteKeys are the parameters that name the widget a captcha is on, by
// method: with the method and the page, what tells one task's captcha
// from another's.
var siteKeys = []string{"sitekey", "googlekey", "gt", "captcha_id", "publickey"}

// TaskKey names the task a submission is for: its method, its site key,
// and a digest of every other parameter (the callback URL, which differs
// between workers, left out) and of the image's bytes. The page shows as
// its host before the digest, never its path or query (which can be
// personal data), so the key can be printed.
func TaskKey(method string, params map[string]string, file []byte) string {
	parts := []string{method}
	for _, k := range siteKeys {
		if v := params[k]; v != "" {
			parts = append(parts, v)
		}
	}
	host := "image"
	if page := params["pageurl"]; page != "" {
		host = "invalid-url"
		if u, err := url.Parse(page); err == nil && u.Host != "" {
			host = u.Hostname()
		}
	}
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if k != "pingback" {
			fmt.Fprintf(h, "%s=%s\x00", k, params[k])
		}
	}
	h.Write(file)
	return strings.Join(append(parts, host+"#"+hex.EncodeToString(h.Sum(nil)[:4])), " ")
}
