package gateway_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// A task that died on a code about the workers' exchange with the service,
// not about the captcha, answers ERROR_CAPTCHA_UNSOLVABLE: passed on, the
// code would tell a caller something false. CaptchaAI's guides poll on
// through ERROR_SERVER_ERROR ("TRANSIENT_ERRORS = {"ERROR_SERVER_ERROR",
// "ERROR_INTERNAL_SERVER_ERROR"}", CaptchaAI-Examples
// articles/how-to-solve-*-using-api/python/solve.py), so a dead task
// answering it would be polled until the script's own timeout; and
// ERROR_WRONG_CAPTCHA_ID from res.php says the id is not the caller's.
func TestDeadTaskOnAnExchangeCodeAnswersUnsolvable(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"ERROR_SERVER_ERROR", "ERROR_WRONG_CAPTCHA_ID"} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil, streamtest.WithMaxAttempts(1),
				streamtest.WithFaults(fakeapi.Faults{Rules: []fakeapi.Rule{{Code: code, OnPoll: code == "ERROR_WRONG_CAPTCHA_ID"}}}))
			id := b.submit(t, alice)
			require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", b.await(t, alice, id))
			var res struct {
				Request   string `json:"request"`
				ErrorText string `json:"error_text"`
			}
			require.NoError(t, json.Unmarshal([]byte(b.call(t, "res.php", "key", alice.Key, "action", "get", "id", id, "json", "1")), &res))
			require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", res.Request)
			require.Contains(t, res.ErrorText, code, "error_text still says what happened")
		})
	}
}

// An image over the body's bound gets the service's code for an image too
// big (ERROR_TOO_BIG_CAPTCHA_FILESIZE: solver/testdata/service/replies.json),
// as one just over the image limit does, in the dialect the caller asked
// for with json=1 among the fields sent before the file.
func TestImageOverTheBodyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithWorkers(0))
	for _, size := range []int{solver.MaxImageSize + 1, 3 * solver.MaxImageSize} {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		require.NoError(t, mw.WriteField("key", alice.Key))
		require.NoError(t, mw.WriteField("method", "post"))
		require.NoError(t, mw.WriteField("json", "1"))
		fw, err := mw.CreateFormFile("file", "captcha.png")
		require.NoError(t, err)
		_, err = fw.Write(bytes.Repeat([]byte{0x89}, size))
		require.NoError(t, err)
		require.NoError(t, mw.Close())
		resp, err := http.Post(b.url+"/in.php", mw.FormDataContentType(), &body)
		require.NoError(t, err)
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		var res struct {
			Status  int    `json:"status"`
			Request string `json:"request"`
		}
		require.NoError(t, json.Unmarshal(out, &res), "size %d: %s", size, out)
		require.Equal(t, "ERROR_TOO_BIG_CAPTCHA_FILESIZE", res.Request, "size %d", size)
	}
	// The same through base64 in an urlencoded body.
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89}, 3*solver.MaxImageSize))
	require.Equal(t, "ERROR_TOO_BIG_CAPTCHA_FILESIZE", b.post(t, "in.php", "key", alice.Key, "method", "base64", "body", big))
}

// post sends the fields as an urlencoded POST body to the gateway's op and
// returns the reply's body.
func (b *bundle) post(t *testing.T, op string, kv ...string) string {
	t.Helper()
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	resp, err := http.PostForm(b.url+"/"+op, v)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return string(body)
}
