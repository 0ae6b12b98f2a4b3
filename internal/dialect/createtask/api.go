package createtask

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
)

// The dialect's calls: each a POST of a JSON object to its path under the
// service's base URL, answered by a JSON object (anti-captcha.com/apidoc/
// methods/*; the npm client posts to 'https://api.anti-captcha.com/' +
// methodName, index.js JSONRequest; CapMonster's JS client to its
// serviceUrl + method, src/HttpClient.ts).
const (
	PathCreateTask    = "createTask"
	PathGetTaskResult = "getTaskResult"
	PathGetBalance    = "getBalance"

	// Reports of a solved task's answer: Anti-Captcha's
	// (apidoc/methods/reportIncorrectImageCaptcha, reportIncorrectRecaptcha,
	// reportCorrectRecaptcha, reportIncorrectHcaptcha), CapMonster's
	// (docs.capmonster.cloud/docs/api/bad-tokens: reportIncorrectImageCaptcha,
	// reportIncorrectTokenCaptcha, reportIncorrectRecaptcha), 2captcha's
	// (api-docs/report-incorrect, h/how-to-submit-reports: reportIncorrect,
	// reportCorrect) and CapSolver's feedbackTask (guide/api-feedback),
	// whose verdict is in its body (FeedbackResult.Invalid).
	PathReportIncorrectImage     = "reportIncorrectImageCaptcha"
	PathReportIncorrectRecaptcha = "reportIncorrectRecaptcha"
	PathReportCorrectRecaptcha   = "reportCorrectRecaptcha"
	PathReportIncorrectHcaptcha  = "reportIncorrectHcaptcha"
	PathReportIncorrectToken     = "reportIncorrectTokenCaptcha"
	PathReportIncorrect          = "reportIncorrect"
	PathReportCorrect            = "reportCorrect"
	PathFeedbackTask             = "feedbackTask"
)

// reports are the report paths and the verdict each carries (good).
var reports = map[string]bool{
	PathReportIncorrectImage: false, PathReportIncorrectRecaptcha: false, PathReportIncorrectHcaptcha: false,
	PathReportIncorrectToken: false, PathReportIncorrect: false,
	PathReportCorrectRecaptcha: true, PathReportCorrect: true,
}

// ReportVerdict says whether path is a report call whose verdict the path
// carries, and which: good for reportCorrect*, bad for reportIncorrect*.
// feedbackTask is not one: its verdict is in its body.
func ReportVerdict(path string) (good, ok bool) {
	good, ok = reports[path]
	return good, ok
}

// IsPath reports whether path is one of the dialect's calls.
func IsPath(path string) bool {
	_, report := reports[path]
	return report || path == PathCreateTask || path == PathGetTaskResult || path == PathGetBalance || path == PathFeedbackTask
}

// The statuses of a task (getTaskResult's status): processing while it is
// not done, ready with its solution. CapSolver also answers idle before a
// task is taken, which a reader takes as processing
// (docs.capsolver.com/guide/api-gettaskresult).
const (
	StatusProcessing = "processing"
	StatusReady      = "ready"
	StatusIdle       = "idle"
)

// ReportAccepted is a report reply's status when the report was taken
// ("status":"success": Anti-Captcha, CapMonster, 2captcha).
const ReportAccepted = "success"

// TaskID is a task's id: a number in Anti-Captcha's, CapMonster's and
// 2captcha's replies (taskId 7654321, 74455221488), a string in CapSolver's.
// It is written as a number; read from a number or a string of digits.
// Ids a server issues should stay at most MaxSafeTaskID, so that a
// JavaScript client, which keeps it as a Number, sends back the same one,
// and at most MaxTaskID32 for a client that keeps it in a 32-bit integer.
type TaskID int64

// MaxSafeTaskID is the largest integer a JavaScript Number holds exactly
// (2^53-1): the official npm clients keep taskId as a Number
// (anticaptcha-npm index.js, capmonstercloud-client-js src/CreateTask.ts).
const MaxSafeTaskID TaskID = 1<<53 - 1

// MaxTaskID32 is the largest id a client that keeps taskId in a signed
// 32-bit integer reads (2^31-1): CaptchaSharp's Anti-Captcha services do
// (github.com/openbullet/CaptchaSharp, CaptchaSharp/Models/AntiCaptcha/
// Responses/TaskCreationAntiCaptchaResponse.cs: `public int TaskId`), as
// Anti-Captcha's own example id fits (taskId 7654321,
// anti-captcha.com/apidoc/methods/createTask).
const MaxTaskID32 TaskID = 1<<31 - 1

// UnmarshalJSON reads a number or a string of digits; null leaves the id
// unset, as an absent taskId.
func (id *TaskID) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if len(s) > 1 && s[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return typeError(b, taskIDType)
	}
	*id = TaskID(n)
	return nil
}

// String is the id's digits.
func (id TaskID) String() string { return strconv.FormatInt(int64(id), 10) }

// ErrorReply is what every reply carries: errorId 0, or the error's number
// with its code and description.
type ErrorReply struct {
	ErrorID          int    `json:"errorId"`
	ErrorCode        string `json:"errorCode,omitempty"`
	ErrorDescription string `json:"errorDescription,omitempty"`
}

// Err is the reply of an error with code (its number from ErrorID) and a
// description.
func Err(code, description string) ErrorReply {
	return ErrorReply{ErrorID: ErrorID(code), ErrorCode: code, ErrorDescription: description}
}

// Failed reports whether the reply is an error's.
func (r ErrorReply) Failed() bool { return r.ErrorID != 0 || r.ErrorCode != "" }

// Error reads like "ERROR_KEY_DOES_NOT_EXIST: …", so a client may return the
// reply as its error.
func (r ErrorReply) Error() string {
	return strings.TrimSuffix(r.ErrorCode+": "+r.ErrorDescription, ": ")
}

// Envelope is what every request carries: the account's key.
type Envelope struct {
	ClientKey string `json:"clientKey"`
}

// CreateTaskRequest is createTask's body. softId, languagePool and
// CapSolver's appId are the caller's business with the service and are
// read as anything (their types differ between the SDKs).
type CreateTaskRequest struct {
	ClientKey string          `json:"clientKey"`
	Task      json.RawMessage `json:"task,omitempty"`
	// CallbackURL is where the result is posted when the task is done
	// (anti-captcha.com/apidoc/methods/createTask, callbackUrl).
	CallbackURL string          `json:"callbackUrl,omitempty"`
	SoftID      json.RawMessage `json:"softId,omitempty"`
}

// CreateTaskResponse is createTask's reply.
type CreateTaskResponse struct {
	ErrorReply
	TaskID TaskID `json:"taskId,omitempty"`
}

// TaskRequest is the body of getTaskResult and of the report calls: the
// key and the task.
type TaskRequest struct {
	ClientKey string `json:"clientKey"`
	TaskID    TaskID `json:"taskId"`
}

// TaskResult is getTaskResult's reply (anti-captcha.com/apidoc/methods/
// getTaskResult): status, the solution once ready, and the task's cost,
// the address it was created from, its creation and end as UNIX times and
// how many workers tried it. Anti-Captcha's own example sends cost and
// solveCount as strings ("cost":"0.000700","solveCount":"0"), so a reader
// takes both forms.
type TaskResult struct {
	ErrorReply
	Status     string          `json:"status,omitempty"`
	Solution   json.RawMessage `json:"solution,omitempty"`
	Cost       Number          `json:"cost,omitempty"`
	IP         string          `json:"ip,omitempty"`
	CreateTime int64           `json:"createTime,omitempty"`
	EndTime    int64           `json:"endTime,omitempty"`
	SolveCount Number          `json:"solveCount,omitempty"`
}

// BalanceResponse is getBalance's reply.
type BalanceResponse struct {
	ErrorReply
	Balance Number `json:"balance"`
}

// FeedbackRequest is CapSolver's feedbackTask body: the verdict in
// result.invalid (docs.capsolver.com/guide/api-feedback). Its taskId is a
// string there; TaskID reads both.
type FeedbackRequest struct {
	ClientKey string          `json:"clientKey"`
	TaskID    TaskID          `json:"taskId"`
	Result    *FeedbackResult `json:"result"`
}

// FeedbackResult is a feedbackTask verdict: Invalid true when the site
// refused the answer.
type FeedbackResult struct {
	Invalid bool            `json:"invalid"`
	Code    json.RawMessage `json:"code,omitempty"`
	Message string          `json:"message,omitempty"`
}

// ReportResponse is a report call's reply: status "success" (ReportAccepted)
// when taken; feedbackTask answers a message instead.
type ReportResponse struct {
	ErrorReply
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
}

// Number is a number written as a JSON number and read from a number or a
// string holding one.
type Number float64

// UnmarshalJSON reads a number or a string holding one.
func (n *Number) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if len(s) > 1 && s[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return typeError(b, numberType)
	}
	*n = Number(f)
	return nil
}

// Decode reads a request or reply body into v, with an error that names the
// field that is wrong ("taskId: want a whole number, not string") or says
// the body is not a JSON object.
func Decode(body []byte, v any) error {
	err := json.Unmarshal(body, v)
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te) && te.Field == "":
		return fmt.Errorf("the body: want a JSON object, not %s", te.Value)
	case errors.As(err, &te):
		return fmt.Errorf("%s: want %s, not %s", te.Field, want(te.Type), te.Value)
	case errors.As(err, &se):
		return fmt.Errorf("the body is not JSON: %v at byte %d", err, se.Offset)
	}
	return err
}

var (
	taskIDType = reflect.TypeFor[TaskID]()
	numberType = reflect.TypeFor[Number]()
	flagType   = reflect.TypeFor[Flag]()
	textType   = reflect.TypeFor[Text]()
)

// want says what a value of type t is, in the words of the dialect.
func want(t reflect.Type) string {
	switch t {
	case taskIDType:
		return "a whole number"
	case flagType:
		return "true or false"
	case textType:
		return "a string or a number"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		return "an object"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list"
	}
	return "a number"
}

// typeError is a field type's own refusal of the JSON value b, in the form
// encoding/json gives its own (it adds the field's name).
func typeError(b []byte, t reflect.Type) error {
	kind := "value"
	switch c := strings.TrimSpace(string(b)); {
	case c == "":
	case c[0] == '"':
		kind = "string"
	case c[0] == '{':
		kind = "object"
	case c[0] == '[':
		kind = "array"
	case c == "true" || c == "false":
		kind = "bool"
	default:
		kind = "number " + c
	}
	return &json.UnmarshalTypeError{Value: kind, Type: t}
}

// Write answers v (a reply) as JSON with status 200: the SDKs read errors
// from the body and take any other status for the service being down
// (capmonstercloud-client-js src/HttpClient.ts expects 200).
func Write(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(Err(CodeServiceUnavailable, "the reply could not be written"))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}
