package sdktest

import (
	"image"
	"image/color"
	"image/png"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	api2captcha "github.com/2captcha/2captcha-go"
	"github.com/stretchr/testify/require"
)

// The official Go SDK with every field its request types of the methods
// captchaq serves can set (2captcha-go v1.1.10, api2captcha.go: ReCaptcha,
// CloudflareTurnstile, Normal, HCaptcha, GeeTest .ToRequest) is not
// refused by the gateway's rule against parameters a method does not know:
// each is solved, its answer the one captchaq's stream holds.
func TestGoSDKEveryField(t *testing.T) {
	env, base := start(t)
	u, err := url.Parse(base)
	require.NoError(t, err)
	img := filepath.Join(t.TempDir(), "captcha.png")
	f, err := os.Create(img)
	require.NoError(t, err)
	m := image.NewGray(image.Rect(0, 0, 40, 16))
	m.Set(3, 3, color.White)
	require.NoError(t, png.Encode(f, m))
	require.NoError(t, f.Close())

	reqs := map[string]api2captcha.Request{
		"recaptcha v3 enterprise": (&api2captcha.ReCaptcha{SiteKey: "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", Url: "https://shop.example/login",
			Enterprise: true, Version: "v3", Action: "login", Score: 0.3}).ToRequest(),
		"recaptcha v2 invisible": (&api2captcha.ReCaptcha{SiteKey: "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", Url: "https://shop.example/login",
			Invisible: true, DataS: "s-value"}).ToRequest(),
		"turnstile challenge page": (&api2captcha.CloudflareTurnstile{SiteKey: "0x4AAAAAAABkMYinukE8nzY", Url: "https://shop.example/checkout",
			Data: "7fab0000b0e0ff00", PageData: "3gAFo2l2MbhmYWJ", Action: "managed", UserAgent: "Mozilla/5.0 (Windows NT 10.0; Win64; x64)"}).ToRequest(),
		"image every option": (&api2captcha.Normal{File: img, Phrase: true, CaseSensitive: true, Numberic: 4, MinLen: 1, MaxLen: 5,
			Lang: "en", HintText: "type the red letters"}).ToRequest(),
		"hcaptcha": (&api2captcha.HCaptcha{SiteKey: "10000000-ffff-ffff-ffff-000000000001", Url: "https://shop.example/"}).ToRequest(),
		"geetest api server": (&api2captcha.GeeTest{GT: "022397c99c9f646f6477822485f30404", Challenge: "a66f31a53a6e1d0f7aa0d4b41bd57ac1",
			Url: "https://shop.example/login", ApiServer: "api-na.geetest.com"}).ToRequest(),
	}
	var wg sync.WaitGroup
	for kind, req := range reqs {
		wg.Go(func() {
			c := api2captcha.NewClient(key.Key)
			c.BaseURL = u
			c.PollingInterval = 1
			c.SoftId = 4580
			token, id, err := c.Solve(req)
			if !assertNoError(t, kind, err) {
				return
			}
			if want := outcomeText(t, env, id); token != want {
				t.Errorf("%s: SDK got %q, captchaq's outcome is %q", kind, token, want)
			}
		})
	}
	wg.Wait()
}
