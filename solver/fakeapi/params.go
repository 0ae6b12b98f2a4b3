package fakeapi

import (
	"bytes"
	"encoding/base64"
	"net"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

// checkParams checks a submission's parameters as the service does, returning
// its error code or "".
func checkParams(method string, p map[string]string, file []byte, fileName string) string {
	if code := checkProxy(p); code != "" {
		return code
	}
	switch method {
	case "userrecaptcha":
		switch {
		case p["googlekey"] == "":
			return classic.CodeGoogleKey
		case !isURL(p["pageurl"]):
			return classic.CodePageURL
		}
	case "turnstile":
		switch {
		case p["sitekey"] == "":
			return classic.CodeBadParameters
		case !isURL(p["pageurl"]):
			return classic.CodePageURL
		}
	case "geetest":
		switch {
		case p["gt"] == "", p["challenge"] == "" && p["version"] != "4":
			return classic.CodeBadParameters
		case !isURL(p["pageurl"]):
			return classic.CodePageURL
		}
	case "hcaptcha":
		switch {
		case p["sitekey"] == "":
			return classic.CodeBadParameters
		case !isURL(p["pageurl"]):
			return classic.CodePageURL
		}
	case "cloudflare_challenge":
		switch {
		case !isURL(p["pageurl"]):
			return classic.CodePageURL
		case p["proxy"] == "", p["proxytype"] == "":
			return classic.CodeBadProxy
		}
	case "friendly_captcha":
		// sitekey and pageurl (2captcha/2captcha-python, twocaptcha/solver.py,
		// friendly_captcha).
		switch {
		case p["sitekey"] == "":
			return classic.CodeBadParameters
		case !isURL(p["pageurl"]):
			return classic.CodePageURL
		}
	case "bls":
		if p["textinstructions"] == "" {
			return classic.CodeBadParameters
		}
		return checkBase64(p["body"])
	case "post":
		if file == nil {
			return classic.CodeZeroCaptchaFilesize
		}
		if ext := strings.ToLower(fileName[strings.LastIndexByte(fileName, '.')+1:]); fileName != "" &&
			ext != "jpg" && ext != "jpeg" && ext != "png" && ext != "gif" {
			return classic.CodeWrongFileExtension
		}
		return checkImage(file)
	case "base64":
		return checkBase64(p["body"])
	default:
		return classic.CodeBadParameters
	}
	return ""
}

// checkBase64 checks a base64-encoded image (body of base64 and bls).
func checkBase64(b64 string) string {
	body := strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' {
			return -1
		}
		return r
	}, b64)
	if body == "" {
		return classic.CodeZeroCaptchaFilesize
	}
	img, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(body, "="))
	if err != nil {
		return classic.CodeUpload
	}
	return checkImage(img)
}

func checkImage(img []byte) string {
	switch {
	case len(img) == 0:
		return classic.CodeZeroCaptchaFilesize
	case len(img) > MaxImageSize:
		return classic.CodeTooBigCaptchaFilesize
	case bytes.HasPrefix(img, []byte{0xFF, 0xD8, 0xFF}),
		bytes.HasPrefix(img, []byte("\x89PNG\r\n\x1a\n")),
		bytes.HasPrefix(img, []byte("GIF87a")), bytes.HasPrefix(img, []byte("GIF89a")):
		return ""
	}
	return classic.CodeImageTypeNotSupported
}

func checkProxy(p map[string]string) string {
	proxy, hasProxy := p["proxy"]
	if t, ok := p["proxytype"]; ok {
		switch strings.ToUpper(t) {
		case "HTTP", "HTTPS", "SOCKS4", "SOCKS5":
		default:
			return classic.CodeBadProxy
		}
		if !hasProxy {
			return classic.CodeBadProxy
		}
	}
	if !hasProxy {
		return ""
	}
	hostport := proxy
	if i := strings.LastIndexByte(proxy, '@'); i >= 0 {
		if !strings.Contains(proxy[:i], ":") {
			return classic.CodeProxyFormat
		}
		hostport = proxy[i+1:]
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return classic.CodeProxyFormat
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return classic.CodeProxyFormat
	}
	return ""
}

func isURL(v string) bool {
	return strings.HasPrefix(v, "http://") && len(v) > len("http://") ||
		strings.HasPrefix(v, "https://") && len(v) > len("https://")
}
