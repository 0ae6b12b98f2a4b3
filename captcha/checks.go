// The checks of single parameter values, as the service makes them.

package captcha

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

func oneOf(vals ...string) func(string) string {
	return func(v string) string {
		for _, a := range vals {
			if strings.EqualFold(v, a) {
				return ""
			}
		}
		return "must be one of " + strings.Join(vals, ", ")
	}
}

func intRange(lo, hi int) func(string) string {
	return func(v string) string {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Sprintf("must be an integer from %d to %d", lo, hi)
		}
		return ""
	}
}

func maxLen(n int) func(string) string {
	return func(v string) string {
		if len(v) > n {
			return fmt.Sprintf("longer than %d bytes", n)
		}
		return ""
	}
}

// maxChars limits a text to n characters (not bytes): the service counts
// characters, so 140 Cyrillic letters are as fine as 140 Latin ones. The
// text must be UTF-8.
func maxChars(n int) func(string) string {
	return func(v string) string {
		if !utf8.ValidString(v) {
			return "must be UTF-8 text"
		}
		if c := utf8.RuneCountInString(v); c > n {
			return fmt.Sprintf("longer than %d characters (%d)", n, c)
		}
		return ""
	}
}

func checkScore(v string) string {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0.1 || f > 0.9 {
		return "must be a number from 0.1 to 0.9"
	}
	return ""
}

func checkKey(v string) string {
	switch {
	case strings.TrimSpace(v) == "":
		return "must not be empty"
	case len(v) > 256:
		return "longer than 256 bytes"
	case strings.ContainsAny(v, " \t\r\n"):
		return "must not contain white space"
	}
	return ""
}

func checkPageURL(v string) string {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "must be an absolute http or https URL"
	}
	if len(v) > 4096 {
		return "longer than 4096 bytes"
	}
	return ""
}

func checkHost(v string) string {
	if v == "" || strings.ContainsAny(v, "/ \t:@") {
		return "must be a host name"
	}
	return ""
}

// checkProxy accepts host:port and login:password@host:port.
func checkProxy(v string) string {
	const want = "must be host:port or login:password@host:port"
	hostport := v
	if i := strings.LastIndexByte(v, '@'); i >= 0 {
		cred := v[:i]
		if c := strings.IndexByte(cred, ':'); c <= 0 || c == len(cred)-1 {
			return want
		}
		hostport = v[i+1:]
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return want
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return want
	}
	return ""
}

// checkImage checks a base64-encoded image: decodable, not empty, at most
// MaxImageSize, JPEG, PNG or GIF.
func checkImage(v string) string {
	img, err := DecodeImage(v)
	if err != nil {
		return "must be base64-encoded: " + err.Error()
	}
	switch {
	case len(img) == 0:
		return "empty image"
	case len(img) > MaxImageSize:
		return fmt.Sprintf("image of %d bytes is larger than %d KB", len(img), MaxImageSize/1024)
	case ImageType(img) == "":
		return "image must be JPEG, PNG or GIF"
	}
	return ""
}

// DecodeImage decodes a base64 image as the API takes it (standard alphabet,
// padding optional, line breaks ignored).
func DecodeImage(v string) ([]byte, error) {
	s := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, v)
	if base64.StdEncoding.DecodedLen(len(s)) > 2*MaxImageSize {
		return nil, fmt.Errorf("%d base64 bytes is far over the %d KB limit", len(s), MaxImageSize/1024)
	}
	return base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
}

// ImageType names the image type from its magic bytes: "jpg", "png", "gif",
// or "" when it is none of them.
func ImageType(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte{0xFF, 0xD8, 0xFF}):
		return "jpg"
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "png"
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "gif"
	}
	return ""
}

// PageHost returns the host of a page URL, which is all that logs and the
// audit trail carry of it (the path and query can be personal data): empty
// when there is no URL, "invalid-url" when it does not parse or names no
// host.
func PageHost(pageURL string) string {
	if pageURL == "" {
		return ""
	}
	u, err := url.Parse(pageURL)
	if err != nil || u.Host == "" {
		return "invalid-url"
	}
	return u.Hostname()
}
