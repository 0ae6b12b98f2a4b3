package solver

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// serviceFixture is one method's documented exchange with the service, from
// solver/testdata/service/*.json: the task's parameters, the in.php fields
// the service expects for them, and the res.php replies it documents, each
// in its json=1 and plain-text forms, with the solution they carry.
type serviceFixture struct {
	file    string
	Method  string            `json:"method"`
	Source  string            `json:"source"`
	Params  map[string]string `json:"params"`
	Sent    map[string]string `json:"sent"`
	Replies []fixtureReply    `json:"replies"`
}

type fixtureReply struct {
	Name      string          `json:"name"`
	Source    string          `json:"source"`
	JSON      string          `json:"json"`
	Plain     string          `json:"plain"`
	Solution  json.RawMessage `json:"solution"`
	UserAgent string          `json:"user_agent"`
}

func loadServiceFixtures(t *testing.T) []serviceFixture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "service", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in testdata/service (%v)", err)
	}
	var out []serviceFixture
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var fx serviceFixture
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fx); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if fx.Source == "" {
			t.Fatalf("%s names no source", f)
		}
		fx.file = filepath.Base(f)
		out = append(out, fx)
	}
	return out
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// TestFixtureAnswers parses every documented res.php reply, in both forms,
// and reads it with the method's typed accessor.
func TestFixtureAnswers(t *testing.T) {
	t.Parallel()
	for _, fx := range loadServiceFixtures(t) {
		for _, r := range fx.Replies {
			for form, body := range map[string]string{"json": r.JSON, "plain": r.Plain} {
				if body == "" {
					continue
				}
				t.Run(fx.file+"/"+r.Name+"/"+form, func(t *testing.T) {
					rep, err := parseReply("res.php", 200, []byte(body), "")
					if err != nil {
						t.Fatalf("parse %s: %v", body, err)
					}
					a := answerOf(rep, "1")
					if !sameJSON(a.Solution, r.Solution) {
						t.Errorf("solution %s, want %s", a.Solution, r.Solution)
					}
					if form == "json" && a.UserAgent != r.UserAgent {
						t.Errorf("user agent %q, want %q", a.UserAgent, r.UserAgent)
					}
					if err := checkTyped(fx, a); err != nil {
						t.Errorf("typed accessor: %v", err)
					}
				})
			}
		}
	}
}

// checkTyped reads a with the typed accessor of fx's method.
func checkTyped(fx serviceFixture, a Answer) error {
	switch {
	case fx.Method == "geetest" && fx.Params["version"] == "4":
		_, err := a.GeeTestV4()
		return err
	case fx.Method == "cloudflare_challenge":
		_, err := a.Cloudflare()
		return err
	case fx.Method == "bls":
		_, err := a.Cells()
		return err
	case fx.Method == "geetest":
		_, err := a.GeeTest()
		return err
	}
	_, err := a.Text()
	return err
}
