package captcha

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
)

var (
	pngImage = base64.StdEncoding.EncodeToString(append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 64)...))
	gifImage = base64.StdEncoding.EncodeToString(append([]byte("GIF89a"), make([]byte, 64)...))
	gif87    = base64.StdEncoding.EncodeToString(append([]byte("GIF87a"), make([]byte, 64)...))
	jpgImage = base64.StdEncoding.EncodeToString(append([]byte{0xFF, 0xD8, 0xFF, 0xE0}, make([]byte, 64)...))
	bmpImage = base64.StdEncoding.EncodeToString(append([]byte("BM"), make([]byte, 64)...))
	bigImage = base64.StdEncoding.EncodeToString(append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, MaxImageSize)...))
)

// imageOf is a base64 PNG of exactly n bytes.
func imageOf(n int) string {
	return base64.StdEncoding.EncodeToString(append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, n-8)...))
}

func p(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func TestValidateAccepts(t *testing.T) {
	t.Parallel()
	const page = "https://shop.example/checkout?x=1"
	tests := []struct {
		method string
		params map[string]string
	}{
		{"userrecaptcha", p("googlekey", "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl", page)},
		{"userrecaptcha", p("googlekey", "k", "pageurl", page, "invisible", "1")},
		{"userrecaptcha", p("googlekey", "k", "pageurl", page, "enterprise", "1", "data-s", "abc")},
		{"userrecaptcha", p("googlekey", "k", "pageurl", page, "version", "v3", "action", "login", "min_score", "0.3")},
		{"userrecaptcha", p("googlekey", "k", "pageurl", page, "version", "v3", "min_score", "0.9")},
		{"post", p("body", pngImage)},
		{"turnstile", p("sitekey", "0x4AAA", "pageurl", page, "action", "managed", "data", "d", "pagedata", "pd")},
		{"geetest", p("gt", "81dc9bdb52d04dc20036dbd8313ed055", "challenge", "1a2b", "pageurl", page, "api_server", "api-na.geetest.com")},
		{"post", p("file", pngImage, "numeric", "1", "min_len", "4", "max_len", "6", "phrase", "0", "regsense", "1", "calc", "0", "language", "2", "textinstructions", "type the red letters")},
		{"base64", p("body", jpgImage)},
		{"base64", p("body", gif87)}, // GIF's first version, as old captcha generators write it
		{"base64", p("body", gifImage, "recaptcha", "1", "textinstructions", "Select all images with buses", "recaptcharows", "3", "recaptchacols", "3")},
		{"turnstile", p("sitekey", "0x4AAA", "pageurl", page, "proxy", "user:pass@10.0.0.1:3128", "proxytype", "HTTP",
			"userAgent", "Mozilla/5.0", "cookies", "a=1; b=2")},
		{"base64", p("body", pngImage, "proxy", "10.0.0.1:1080", "proxytype", "socks5")},
		{"geetest", p("gt", "e392e1d7fd421dc63325744d5a2b9c73", "version", "4", "pageurl", page)},
		{"hcaptcha", p("sitekey", "a5f74b19-9e45-40e0-b45d-47ff91b7a6c2", "pageurl", page)},
		{"cloudflare_challenge", p("pageurl", page, "proxy", "user:pass@10.0.0.1:3128", "proxytype", "HTTP")},
		{"bls", p("body", pngImage, "textinstructions", "select 317")},
		// 140 characters, 280 bytes: the service counts characters.
		{"base64", p("body", pngImage, "textinstructions", strings.Repeat("я", 140))},
		{"bls", p("body", pngImage, "textinstructions", strings.Repeat("я", 140))},
		// Every method takes the common parameters.
		{"turnstile", p("sitekey", "0x4AAA", "pageurl", page, "soft_id", "4583", "header_acao", "1")},
		// The ends of the ranges: the lowest score, the highest port, an
		// image of exactly MaxImageSize bytes.
		{"userrecaptcha", p("googlekey", "k", "pageurl", page, "version", "v3", "min_score", "0.1")},
		{"turnstile", p("sitekey", "0x4AAA", "pageurl", page, "proxy", "10.0.0.1:65535", "proxytype", "HTTP")},
		{"base64", p("body", imageOf(MaxImageSize))},
	}
	for _, tt := range tests {
		if err := Validate(tt.method, tt.params); err != nil {
			t.Errorf("Validate(%s, %v): %v", tt.method, tt.params, err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	t.Parallel()
	const page = "https://shop.example/"
	tests := []struct {
		method string
		params map[string]string
		field  string
		msg    string
	}{
		{"", nil, "method", "required"},
		{"funcaptcha", p("publickey", "x"), "method", `unknown method "funcaptcha"`},
		{"hcaptcha", p("sitekey", "x"), "params.pageurl", "required for method hcaptcha"},
		{"cloudflare_challenge", p("pageurl", page), "params.proxy", "required for method cloudflare_challenge"},
		{"cloudflare_challenge", p("pageurl", page, "proxy", "10.0.0.1:80"), "params.proxytype", "required for method cloudflare_challenge"},
		{"geetest", p("gt", "g", "pageurl", page, "version", "3"), "params.challenge", "required for method geetest"},
		{"geetest", p("gt", "g", "pageurl", page, "version", "5"), "params.version", "one of 3, 4"},
		{"bls", p("body", pngImage), "params.textinstructions", "required for method bls"},
		{"bls", p("body", pngImage, "textinstructions", strings.Repeat("я", 141)), "params.textinstructions", "longer than 140 characters"},
		{"turnstile", p("sitekey", "x"), "params.pageurl", "required for method turnstile"},
		{"turnstile", p("pageurl", page), "params.sitekey", "required for method turnstile"},
		{"turnstile", p("sitekey", "", "pageurl", page), "params.sitekey", "required for method turnstile"},
		{"turnstile", p("sitekey", "x", "pageurl", "shop.example/"), "params.pageurl", "absolute http or https URL"},
		{"turnstile", p("sitekey", "x", "pageurl", page, "key", "y"), "params.key", "reserved"},
		{"turnstile", p("sitekey", "x", "pageurl", page, "method", "post"), "params.method", "reserved"},
		{"turnstile", p("sitekey", "x", "pageurl", page, "soft_id", "abc"), "params.soft_id", "integer"},
		{"userrecaptcha", p("pageurl", page), "params.googlekey", "required for method userrecaptcha"},
		{"userrecaptcha", p("googlekey", "k", "pageurl", page, "invisible", "yes"), "params.invisible", "integer from 0 to 1"},
		{"userrecaptcha", p("googlekey", "k", "pageurl", page, "min_score", "0.3"), "params.min_score", "only with version=v3"},
		{"userrecaptcha", p("googlekey", "k", "pageurl", page, "version", "v3", "min_score", "2"), "params.min_score", "0.1 to 0.9"},
		{"userrecaptcha", p("googlekey", "k k", "pageurl", page), "params.googlekey", "white space"},
		{"geetest", p("gt", "g", "pageurl", page), "params.challenge", "required for method geetest"},
		{"post", p(), "params.file", "required for method post"},
		{"post", p("file", "!!!"), "params.file", "base64"},
		{"post", p("file", bmpImage), "params.file", "JPEG, PNG or GIF"},
		{"base64", p("body", bigImage), "params.body", "larger than 1024 KB"},
		{"base64", p("body", ""), "params.body", "required for method base64"},
		{"base64", p("body", pngImage, "recaptcha", "1"), "params.textinstructions", "required with recaptcha=1"},
		{"base64", p("body", pngImage, "numeric", "9"), "params.numeric", "0 to 4"},
		{"turnstile", p("sitekey", "x", "pageurl", page, "proxy", "10.0.0.1"), "params.proxy", "host:port"},
		{"turnstile", p("sitekey", "x", "pageurl", page, "proxy", "user@10.0.0.1:80"), "params.proxy", "host:port"},
		{"turnstile", p("sitekey", "x", "pageurl", page, "proxy", ":pass@10.0.0.1:80"), "params.proxy", "host:port"},
		{"turnstile", p("sitekey", "x", "pageurl", page, "proxy", "user:@10.0.0.1:80"), "params.proxy", "host:port"},
		{"turnstile", p("sitekey", "x", "pageurl", page, "proxy", "10.0.0.1:80", "proxytype", "FTP"), "params.proxytype", "one of"},
		{"turnstile", p("sitekey", "x", "pageurl", page, "proxytype", "HTTP"), "params.proxy", "required with proxytype"},
		// json is captchaq's own (json=1 on every call): a task's json=0 would
		// turn the replies the worker reads into plain text.
		{"turnstile", p("sitekey", "x", "pageurl", page, "json", "0"), "params.json", "reserved"},
		// A URL with a scheme and no host is no page the service can open.
		{"turnstile", p("sitekey", "x", "pageurl", "https://"), "params.pageurl", "absolute http or https URL"},
		{"turnstile", p("sitekey", "x", "pageurl", "https:///checkout"), "params.pageurl", "absolute http or https URL"},
		// 0.9 is the top of the range (0.95 lies between it and 1).
		{"userrecaptcha", p("googlekey", "k", "pageurl", page, "version", "v3", "min_score", "0.95"), "params.min_score", "0.1 to 0.9"},
		// A parameter the method does not know is refused, by name, with the
		// known name it is a near miss of: the service would ignore it.
		{"base64", p("body", pngImage, "pageurl", page), "params.pageurl", "not a parameter of method base64"},
		{"turnstile", p("sitekey", "0x4AAA", "pageurl", page, "siteKey", "y"), "params.siteKey", `not a parameter of method turnstile (did you mean "sitekey"?)`},
		{"turnstile", p("sitekey", "0x4AAA", "pageurl", page, "colour", "red"), "params.colour", "not a parameter of method turnstile"},
		// The image once: post takes file or body, never both.
		{"post", p("file", pngImage, "body", pngImage), "params.body", "not with file"},
		// Just past the ends of the ranges.
		{"userrecaptcha", p("googlekey", "k", "pageurl", page, "version", "v3", "min_score", "0.05"), "params.min_score", "0.1 to 0.9"},
		{"turnstile", p("sitekey", "x", "pageurl", page, "proxy", "10.0.0.1:65536"), "params.proxy", "host:port"},
		{"base64", p("body", imageOf(MaxImageSize+1)), "params.body", "larger than 1024 KB"},
		// friendly_captcha needs both the site key and the page.
		{"friendly_captcha", p("sitekey", "x"), "params.pageurl", "required for method friendly_captcha"},
		{"friendly_captcha", p("pageurl", page), "params.sitekey", "required for method friendly_captcha"},
		{"friendly_captcha", p("sitekey", "FC 1", "pageurl", page), "params.sitekey", "white space"},
		// A required text of blanks is as missing as none (its own check,
		// a length, would let it through).
		{"bls", p("body", pngImage, "textinstructions", "  "), "params.textinstructions", "required for method bls"},
	}
	for _, tt := range tests {
		err := Validate(tt.method, tt.params)
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("Validate(%s, %v) = %v, want a *ValidationError", tt.method, tt.params, err)
			continue
		}
		if ve.Field != tt.field || !strings.Contains(ve.Msg, tt.msg) {
			t.Errorf("Validate(%s, %v) = %q, want field %s saying %q", tt.method, tt.params, err, tt.field, tt.msg)
		}
		if !strings.HasPrefix(err.Error(), tt.field+": ") {
			t.Errorf("error %q does not start with its field", err)
		}
	}
}

func TestValidateErrorReads(t *testing.T) {
	t.Parallel()
	err := Validate("turnstile", p("sitekey", "x"))
	if got, want := err.Error(), "params.pageurl: required for method turnstile"; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}

func TestMethods(t *testing.T) {
	t.Parallel()
	want := []string{"base64", "bls", "cloudflare_challenge", "friendly_captcha", "geetest", "hcaptcha", "post", "turnstile", "userrecaptcha"}
	if got := Methods(); !slices.Equal(got, want) {
		t.Errorf("Methods() = %v, want %v", got, want)
	}
}

func TestKind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method string
		params map[string]string
		want   string
	}{
		{"userrecaptcha", nil, KindRecaptcha},
		{"userrecaptcha", p("invisible", "1"), KindRecaptcha},
		{"userrecaptcha", p("version", "v3"), KindRecaptchaV3},
		{"turnstile", nil, KindTurnstile},
		{"geetest", nil, KindGeeTest},
		{"post", nil, KindImage},
		{"base64", p("recaptcha", "1"), KindGrid},
		{"geetest", p("version", "4"), KindGeeTestV4},
		{"hcaptcha", nil, KindHCaptcha},
		{"cloudflare_challenge", nil, KindCloudflare},
		{"bls", nil, KindBLS},
	}
	for _, tt := range tests {
		if got := KindOf(tt.method, tt.params); got != tt.want {
			t.Errorf("KindOf(%s, %v) = %s, want %s", tt.method, tt.params, got, tt.want)
		}
	}
}

func TestUnknownParams(t *testing.T) {
	t.Parallel()
	const page = "https://shop.example/"
	got := UnknownParams("userrecaptcha", p("googelkey", "k", "googlekey", "k", "pageurl", page, "soft_id", "1", "zzz", "1", "PageUrl", "x"))
	want := []UnknownParam{
		{Name: "PageUrl", Method: "userrecaptcha", Suggest: "pageurl"},
		{Name: "googelkey", Method: "userrecaptcha", Suggest: "googlekey"},
		{Name: "zzz", Method: "userrecaptcha"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("UnknownParams = %+v, want %+v", got, want)
	}
	if s := got[1].String(); !strings.Contains(s, "params.googelkey: not a parameter of method userrecaptcha") ||
		!strings.Contains(s, `did you mean "googlekey"?`) {
		t.Errorf("warning %q does not name the parameter and its near miss", s)
	}
	if s := got[2].String(); strings.Contains(s, "did you mean") {
		t.Errorf("warning %q suggests a name for a far miss", s)
	}
	if u := UnknownParams("base64", p("body", pngImage, "pageurl", page)); len(u) != 1 || u[0].Suggest != "" {
		t.Errorf("pageurl on base64: %+v, want one unknown without a suggestion", u)
	}
	if u := UnknownParams("turnstile", p("sitekey", "x", "pageurl", page, "soft_id", "1", "header_acao", "1")); u != nil {
		t.Errorf("soft_id and header_acao are known to every method, got %+v", u)
	}
}
