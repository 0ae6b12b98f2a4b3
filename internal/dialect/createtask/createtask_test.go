package createtask_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
)

type fixtures struct {
	Tasks []struct {
		Source string
		Body   json.RawMessage
		Method string
		Params map[string]string
	}
	Replies []struct {
		Source     string
		Body       json.RawMessage
		Status     string
		Cost       float64
		CreateTime int64
		ErrorID    int
		ErrorCode  string
	}
	CreateReplies []struct {
		Source string
		Body   json.RawMessage
		TaskID int64
	}
}

func load(t *testing.T) fixtures {
	t.Helper()
	b, err := os.ReadFile("testdata/providers.json")
	if err != nil {
		t.Fatal(err)
	}
	var f fixtures
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestProvidersRequests reads every createTask body the providers publish
// (or their official clients send) into the captchaq request it asks for,
// which the catalogue's checks take where the fixture's values are real.
func TestProvidersRequests(t *testing.T) {
	t.Parallel()
	f := load(t)
	if len(f.Tasks) < 14 {
		t.Fatalf("%d task fixtures", len(f.Tasks))
	}
	for _, c := range f.Tasks {
		var req createtask.CreateTaskRequest
		if err := createtask.Decode(c.Body, &req); err != nil {
			t.Fatalf("%s: %v", c.Source, err)
		}
		task, tt, terr := createtask.ParseTask(req.Task)
		if terr != nil {
			t.Fatalf("%s: %v", c.Source, terr)
		}
		method, params, terr := task.Request(tt)
		if terr != nil {
			t.Fatalf("%s: %v", c.Source, terr)
		}
		if method != c.Method {
			t.Errorf("%s: method %s, want %s", c.Source, method, c.Method)
		}
		gotP, _ := json.Marshal(params)
		wantP, _ := json.Marshal(c.Params)
		if string(gotP) != string(wantP) {
			t.Errorf("%s: params\n got %s\nwant %s", c.Source, gotP, wantP)
		}
		if !captcha.Known(method) {
			t.Errorf("%s: %s is no method of the catalogue", c.Source, method)
		}
	}
}

// TestProvidersReplies reads the providers' published replies with the
// client side's types: cost and solveCount as strings or numbers, taskId
// as a number or a string of digits.
func TestProvidersReplies(t *testing.T) {
	t.Parallel()
	f := load(t)
	for _, c := range f.Replies {
		var r createtask.TaskResult
		if err := createtask.Decode(c.Body, &r); err != nil {
			t.Fatalf("%s: %v", c.Source, err)
		}
		if r.Status != c.Status || float64(r.Cost) != c.Cost || r.CreateTime != c.CreateTime || r.ErrorID != c.ErrorID || r.ErrorCode != c.ErrorCode {
			t.Errorf("%s: read %+v", c.Source, r)
		}
		if r.Failed() != (c.ErrorID != 0) {
			t.Errorf("%s: Failed() = %v", c.Source, r.Failed())
		}
	}
	for _, c := range f.CreateReplies {
		var r createtask.CreateTaskResponse
		if err := createtask.Decode(c.Body, &r); err != nil {
			t.Fatalf("%s: %v", c.Source, err)
		}
		if int64(r.TaskID) != c.TaskID {
			t.Errorf("%s: taskId %d, want %d", c.Source, r.TaskID, c.TaskID)
		}
		out, _ := json.Marshal(r)
		if want := `{"errorId":0,"taskId":` + strconv.FormatInt(c.TaskID, 10) + `}`; string(out) != want {
			t.Errorf("%s: written %s, want %s", c.Source, out, want)
		}
	}
}

// TestEveryClassicCodeHasAWord maps every in.php/res.php code package
// classic declares: to a code with a number of its own, or passed on as
// it is (with errorId 1); never to nothing.
func TestEveryClassicCodeHasAWord(t *testing.T) {
	t.Parallel()
	fs := token.NewFileSet()
	f, err := parser.ParseFile(fs, "../classic/codes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, v := range s.(*ast.ValueSpec).Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok {
					continue
				}
				code, _ := strconv.Unquote(lit.Value)
				n++
				if got := createtask.FromClassic(code); got == "" || createtask.ErrorID(got) < 1 {
					t.Errorf("FromClassic(%s) = %q, errorId %d", code, got, createtask.ErrorID(got))
				}
			}
		}
	}
	if n < 40 {
		t.Fatalf("%d classic codes read", n)
	}
	for code, want := range map[string]string{
		classic.CodeWrongCaptchaID:    createtask.CodeNoSuchCaptchaID,
		classic.CodeCaptchaUnsolvable: createtask.CodeCaptchaUnsolvable,
		classic.CodeBadParameters:     createtask.CodeInvalidTaskData,
		classic.CodeMaxUserTurn:       createtask.CodeTooMuchRequests,
		classic.CodeServerError:       createtask.CodeServiceUnavailable,
	} {
		if got := createtask.FromClassic(code); got != want {
			t.Errorf("FromClassic(%s) = %s, want %s", code, got, want)
		}
	}
	// Back: every code FromClassic gives is a classic one again.
	for code := range map[string]bool{createtask.CodeTaskNotSupported: true, createtask.CodeInvalidTaskData: true,
		createtask.CodeServiceUnavailable: true, createtask.CodeNoSuchCaptchaID: true, createtask.CodeTooMuchRequests: true} {
		if back := createtask.ToClassic(code); !classic.IsCode(back) || createtask.FromClassic(back) == "" {
			t.Errorf("ToClassic(%s) = %s", code, back)
		}
	}
	if got := createtask.ToClassic(createtask.CodeServiceUnavailable); got != classic.CodeServerError {
		t.Errorf("ToClassic(%s) = %s, want %s", createtask.CodeServiceUnavailable, got, classic.CodeServerError)
	}
	for code, id := range map[string]int{createtask.CodeKeyDoesNotExist: 1, createtask.CodeCaptchaUnsolvable: 12,
		createtask.CodeNoSuchCaptchaID: 16, createtask.CodeTaskNotSupported: 23, createtask.CodeInvalidTaskData: 1} {
		if got := createtask.ErrorID(code); got != id {
			t.Errorf("ErrorID(%s) = %d, want %d", code, got, id)
		}
	}
}

// TestSolutionRoundTrip writes each kind's answer as its solution and reads
// it back, as the gateway and the solver's JSON client do on either side.
func TestSolutionRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		method string
		kind   createtask.Kind
		answer string
		ua     string
		want   string
	}{
		{"userrecaptcha", createtask.KindRecaptchaV2, `"03Atok"`, "", `{"gRecaptchaResponse":"03Atok"}`},
		{"hcaptcha", createtask.KindHCaptcha, `"P1_tok"`, "UA", `{"gRecaptchaResponse":"P1_tok","userAgent":"UA"}`},
		{"turnstile", createtask.KindTurnstile, `"0.tok"`, "UA", `{"token":"0.tok","userAgent":"UA"}`},
		{"base64", createtask.KindImage, `"deditur"`, "", `{"text":"deditur"}`},
		{"friendly_captcha", createtask.KindFriendlyCaptcha, `"sPwOkl_n2Rh5Ah"`, "UA", `{"token":"sPwOkl_n2Rh5Ah","userAgent":"UA"}`},
		{"geetest", createtask.KindGeeTest, `{"geetest_challenge":"c","geetest_validate":"v","geetest_seccode":"v|jordan"}`, "",
			`{"challenge":"c","validate":"v","seccode":"v|jordan"}`},
		{"geetest", createtask.KindGeeTest, `"{\"geetest_challenge\":\"c\",\"geetest_validate\":\"v\",\"geetest_seccode\":\"s\"}"`, "",
			`{"challenge":"c","validate":"v","seccode":"s"}`},
		{"geetest", createtask.KindGeeTest, `{"captcha_id":"i","lot_number":"l","pass_token":"p","gen_time":"1","captcha_output":"o"}`, "",
			`{"captcha_id":"i","lot_number":"l","pass_token":"p","gen_time":"1","captcha_output":"o"}`},
	} {
		sol, err := createtask.Solution(c.method, json.RawMessage(c.answer), c.ua)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.answer, err)
		}
		if !sameJSON(sol, c.want) {
			t.Errorf("%s: solution %s, want %s", c.method, sol, c.want)
		}
		ans, ua, err := createtask.Answer(c.kind, sol)
		if err != nil || ua != c.ua {
			t.Fatalf("%s: Answer: %v, ua %q", c.method, err, ua)
		}
		back, _ := createtask.Solution(c.method, ans, ua)
		if !sameJSON(back, c.want) {
			t.Errorf("%s: round trip %s", c.method, back)
		}
	}
	if _, err := createtask.Solution("cloudflare_challenge", json.RawMessage(`"x"`), ""); err == nil {
		t.Error("a method without a JSON type has a solution shape")
	}
}

// TestTypesInAnyCase looks every type up in its own, lower and upper case,
// and refuses what no provider names.
func TestTypesInAnyCase(t *testing.T) {
	t.Parallel()
	for _, tt := range createtask.Types() {
		for _, name := range []string{tt.Name, strings.ToLower(tt.Name), strings.ToUpper(tt.Name)} {
			if got, ok := createtask.LookupType(name); !ok || got != tt {
				t.Errorf("LookupType(%s) = %+v, %v", name, got, ok)
			}
		}
	}
	for _, name := range []string{"", "FunCaptchaTaskProxyless", "RecaptchaV2TaskProxyles", "ImageToText"} {
		if _, ok := createtask.LookupType(name); ok {
			t.Errorf("LookupType(%q) found", name)
		}
	}
}

func sameJSON(got []byte, want string) bool {
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}

// TestTaskForRoundTrip builds, from each fixture's captchaq request, the
// task a client sends a JSON provider, and reads it back as the gateway
// does: the same request. The task's type is of the kind TaskFor names.
func TestTaskForRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range load(t).Tasks {
		task, kind, err := createtask.TaskFor(c.Method, c.Params)
		if err != nil {
			t.Fatalf("%s: %v", c.Source, err)
		}
		raw, err := json.Marshal(task)
		if err != nil {
			t.Fatal(err)
		}
		back, tt, terr := createtask.ParseTask(raw)
		if terr != nil {
			t.Fatalf("%s: %s: %v", c.Source, raw, terr)
		}
		if tt.Kind != kind {
			t.Errorf("%s: type %s of kind %d, TaskFor said %d", c.Source, tt.Name, tt.Kind, kind)
		}
		method, params, terr := back.Request(tt)
		if terr != nil {
			t.Fatalf("%s: %v", c.Source, terr)
		}
		gotP, _ := json.Marshal(params)
		wantP, _ := json.Marshal(c.Params)
		if method != c.Method || string(gotP) != string(wantP) {
			t.Errorf("%s: round trip %s %s, want %s %s (task %s)", c.Source, method, gotP, c.Method, wantP, raw)
		}
	}
	for _, m := range []string{"cloudflare_challenge", "bls"} {
		if _, _, err := createtask.TaskFor(m, map[string]string{"pageurl": "https://x/"}); err == nil {
			t.Errorf("TaskFor(%s) has a type", m)
		}
	}
}
