// Reading a request: the form or multipart body, and its values.

package fakeapi

import (
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"net/http"
)

// values are a request's parameters from the query and the body.
type values map[string][]string

func (v values) get(k string) string {
	if vs := v[k]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// params are the task's parameters: everything but the request's own
// (key, method, json, action, id, soft_id).
func (v values) params() map[string]string {
	out := map[string]string{}
	for k, vs := range v {
		switch k {
		case "key", "method", "json", "action", "id", "soft_id", "header_acao":
			continue
		}
		if len(vs) > 0 {
			out[k] = vs[0]
		}
	}
	return out
}

// parseRequest reads a request's parameters from the query and the body
// (form or multipart) and the uploaded file, if any.
func parseRequest(w http.ResponseWriter, r *http.Request) (v values, file []byte, fileName string, err error) {
	v = values(r.URL.Query())
	if r.Method != http.MethodPost {
		return v, nil, "", nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxRequest)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "multipart/form-data":
		if err := r.ParseMultipartForm(maxRequest); err != nil {
			return v, nil, "", fmt.Errorf("multipart: %w", err)
		}
		for k, vs := range r.MultipartForm.Value {
			v[k] = append(vs, v[k]...)
		}
		if fhs := r.MultipartForm.File["file"]; len(fhs) > 0 {
			f, err := fhs[0].Open()
			if err != nil {
				return v, nil, "", fmt.Errorf("file: %w", err)
			}
			defer f.Close()
			file, err = io.ReadAll(f)
			if err != nil {
				return v, nil, "", fmt.Errorf("file: %w", err)
			}
			if file == nil {
				file = []byte{}
			}
			fileName = fhs[0].Filename
		}
	default:
		if err := r.ParseForm(); err != nil {
			return v, nil, "", fmt.Errorf("form: %w", err)
		}
		for k, vs := range r.PostForm {
			v[k] = append(vs, v[k]...)
		}
	}
	if v.get("method") == "post" && file == nil {
		// A post without a multipart file may carry the image base64-encoded
		// in a form field: body, as CaptchaAI's grid example sends it
		// (CaptchaAI-Examples, articles/how-to-solve-grid-image-captcha-
		// automatically/), or file.
		b64 := v.get("body")
		if b64 == "" {
			b64 = v.get("file")
		}
		if b64 != "" {
			if b, err := base64.StdEncoding.DecodeString(b64); err == nil {
				file = b
			}
		}
	}
	return v, file, fileName, nil
}
