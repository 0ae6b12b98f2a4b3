package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/captchaq/captchaq/solver"
)

// maxRequest bounds a request's body: an image of the service's largest
// size, base64-encoded, and the other fields.
const maxRequest = 2*solver.MaxImageSize + 64<<10

// form is a request's fields, from the query and the body; the body wins.
type form map[string]string

// readForm reads a request's fields the ways the service's callers send
// them: the query (GET; 2captcha/2captcha-go sends res.php so), an
// urlencoded form (CaptchaAI-Examples' guides, 2captcha-go's in.php), a
// multipart form whose `file` is the image (2captcha-go, Normal with File),
// or a JSON object (@2captcha/captcha-solver sends in.php so for images:
// src/structs/2captcha.ts, imageCaptcha). An uploaded file becomes the
// `file` field, base64-encoded, as captchaq's tasks carry images.
func readForm(w http.ResponseWriter, r *http.Request) (form, error) {
	f := form{}
	for k, vs := range r.URL.Query() {
		if len(vs) > 0 {
			f[k] = vs[0]
		}
	}
	if r.Method != http.MethodPost {
		return f, nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxRequest)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "multipart/form-data":
		if err := readMultipart(r, f); err != nil {
			return f, fmt.Errorf("multipart body: %w", err)
		}
	case "application/json":
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return f, fmt.Errorf("body: %w", err)
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return f, fmt.Errorf("JSON body: want an object: %w", err)
		}
		for k, raw := range obj {
			v, err := jsonText(raw)
			if err != nil {
				return f, fmt.Errorf("JSON body, field %s: %w", k, err)
			}
			f[k] = v
		}
	default:
		if err := r.ParseForm(); err != nil {
			return f, fmt.Errorf("form body: %w", err)
		}
		for k, vs := range r.PostForm {
			if len(vs) > 0 {
				f[k] = vs[0]
			}
		}
	}
	return f, nil
}

// maxParts bounds the parts of a multipart body: the service's fields
// are a few dozen.
const maxParts = 1000

// readMultipart reads a multipart body's parts into f in the order they
// come, so that the fields before an oversized file (json=1 among them)
// are known when the body's bound cuts it. The part named file is the
// image, base64-encoded as captchaq's tasks carry it.
func readMultipart(r *http.Request, f form) error {
	mr, err := r.MultipartReader()
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for n := 0; ; n++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if n == maxParts {
			return fmt.Errorf("more than %d parts", maxParts)
		}
		name := p.FormName()
		b, err := io.ReadAll(p)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if name == "" || seen[name] {
			continue // the first of a field named twice, as in a query
		}
		seen[name] = true
		if name == "file" {
			f[name] = base64.StdEncoding.EncodeToString(b)
		} else {
			f[name] = string(b)
		}
	}
}

// jsonText is a JSON body field as the form would carry it: strings as
// they are, numbers as written, booleans as 1 and 0 (the SDK sends
// header_acao and soft_id as numbers).
func jsonText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) > 0 && raw[0] == '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case bytes.Equal(raw, []byte("true")):
		return "1", nil
	case bytes.Equal(raw, []byte("false")), bytes.Equal(raw, []byte("null")):
		return "0", nil
	}
	if _, err := strconv.ParseFloat(string(raw), 64); err != nil {
		return "", fmt.Errorf("want a string, number or boolean")
	}
	return string(raw), nil
}
