package gateway

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/captcha"
)

// maxRequest bounds a request's body: an image of the service's largest
// size (captcha.MaxImageSize, 1024 KB), base64-encoded, and the other
// fields. The body is never buffered beyond it.
const maxRequest = 2*captcha.MaxImageSize + 64<<10

// form is a request's fields, from the query and the body; the body wins.
type form map[string]string

// errUnknownKey is readForm's error for a key the gateway does not know,
// found in the body: the rest of the body is not read.
var errUnknownKey = errors.New("no such gateway key")

// readForm reads a request's fields the ways the service's callers send
// them: the query (GET; 2captcha/2captcha-go sends res.php so), an
// urlencoded form (CaptchaAI-Examples' guides, 2captcha-go's in.php), a
// multipart form whose `file` is the image (2captcha-go, Normal with File),
// or a JSON object (@2captcha/captcha-solver sends in.php so for images:
// src/structs/2captcha.ts, imageCaptcha). An uploaded file becomes the
// `file` field, base64-encoded, as captchaq's tasks carry images.
//
// The body is read field by field, at most maxRequest bytes: as soon as a
// form's key field is read, known decides on it, and a key it does not
// know ends the reading with errUnknownKey. A body the caller sent as JSON
// that does not parse is answered in JSON.
func readForm(w http.ResponseWriter, r *http.Request, known func(string) bool) (form, error) {
	f := queryForm(r)
	if r.Method != http.MethodPost {
		return f, nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxRequest)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "multipart/form-data":
		if err := readMultipart(r, f, known); err != nil {
			return f, fmt.Errorf("multipart body: %w", err)
		}
	case "application/json":
		if err := readJSON(r.Body, f, known); err != nil {
			if f["json"] == "" {
				f["json"] = "1"
			}
			return f, err
		}
	case "application/x-www-form-urlencoded":
		if err := readURLEncoded(r.Body, f, known); err != nil {
			return f, fmt.Errorf("form body: %w", err)
		}
	}
	return f, nil
}

// queryForm is the fields of a request's query, the first of each name.
func queryForm(r *http.Request) form {
	f := form{}
	for k, vs := range r.URL.Query() {
		if len(vs) > 0 {
			f[k] = vs[0]
		}
	}
	return f
}

// readJSON reads a JSON object body into f (its fields win over the
// query's), and checks its key with known.
func readJSON(body io.Reader, f form, known func(string) bool) error {
	b, err := io.ReadAll(body)
	if err != nil {
		return fmt.Errorf("body: %w", err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("JSON body: want an object: %w", err)
	}
	for k, raw := range obj {
		v, err := jsonText(raw)
		if err != nil {
			return fmt.Errorf("JSON body, field %s: %w", k, err)
		}
		f[k] = v
	}
	if _, ok := obj["key"]; ok && !known(f["key"]) {
		return errUnknownKey
	}
	return nil
}

// readURLEncoded reads an urlencoded body field by field into f (the first
// of each name in the body, winning over the query's), deciding on the key
// with known as soon as it is read.
func readURLEncoded(body io.Reader, f form, known func(string) bool) error {
	br := bufio.NewReaderSize(body, 4096)
	seen := map[string]bool{}
	for {
		field, err := br.ReadString('&')
		if err != nil && err != io.EOF {
			return err
		}
		if field = strings.TrimSuffix(field, "&"); field != "" {
			name, value, _ := strings.Cut(field, "=")
			k, err1 := url.QueryUnescape(name)
			v, err2 := url.QueryUnescape(value)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("field %.40q: bad escape", name)
			}
			if !seen[k] {
				seen[k], f[k] = true, v
				if k == "key" && !known(v) {
					return errUnknownKey
				}
			}
		}
		if err == io.EOF {
			return nil
		}
	}
}

// maxParts bounds the parts of a multipart body: the service's fields
// are a few dozen.
const maxParts = 1000

// readMultipart reads a multipart body's parts into f in the order they
// come, so that the fields before an oversized file (json=1 among them)
// are known when the body's bound cuts it, and the key is decided on
// (known) as soon as its part is read. The part named file is the image,
// base64-encoded as captchaq's tasks carry it.
func readMultipart(r *http.Request, f form, known func(string) bool) error {
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
		if name == "key" && !known(f[name]) {
			return errUnknownKey
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
