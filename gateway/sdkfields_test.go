package gateway_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Requests as the official JavaScript SDK (@2captcha/captcha-solver 1.3.9,
// dist/structs/2captcha.js) sends them with the fields its JSDoc names:
// its defaultPayload (key, json=1, header_acao, soft_id) spread with the
// caller's fields, unrenamed for these methods. recaptcha documents
// `datas` ("Value of data-s parameter you found on page"), which is the
// service's data-s, and hcaptcha `domain` ("hcaptcha.com or
// js.hcaptcha.com"). Each is queued, not refused by the rule against
// parameters a method does not know.
func TestJavaScriptSDKDocumentedFieldsQueued(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	sdk := []string{"key", alice.Key, "json", "1", "header_acao", "0", "soft_id", "4580"}
	cases := map[string][]string{
		"recaptcha datas": {"method", "userrecaptcha", "googlekey", "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-",
			"pageurl", "https://shop.example/search", "invisible", "1", "datas", "s-value-from-the-page"},
		"hcaptcha domain": {"method", "hcaptcha", "sitekey", "10000000-ffff-ffff-ffff-000000000001",
			"pageurl", "https://shop.example/", "domain", "js.hcaptcha.com"},
	}
	for name, fields := range cases {
		var res struct {
			Status  int    `json:"status"`
			Request string `json:"request"`
		}
		out := b.call(t, "in.php", append(append([]string{}, sdk...), fields...)...)
		require.NoError(t, json.Unmarshal([]byte(out), &res), "%s: %s", name, out)
		require.Equal(t, 1, res.Status, "%s: %s", name, out)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := b.env.Client.TaskOf(ctx, alice.Producer+"-"+res.Request)
		cancel()
		require.NoError(t, err, "%s: queued", name)
	}
}
