package classic

import (
	"encoding/json"
	"net/http"
)

// ActionThreadsInfo is res.php's action answering the account's threads:
// CaptchaAI's official Python SDK "validates the key and reads the account
// thread cap via a startup threadsinfo call" in its constructor
// (pypi.org/project/captchaai, Configuration), and CaptchaAI's MCP server,
// built on that SDK, reports "threads, working_threads, free_threads"
// (pypi.org/project/captchaai-mcp, get_threads).
//
// No primary source of the reply's shape could be had (the SDK's
// repository, github.com/CaptchaAI/captchaai-python, and the MCP server's
// are not in the stored material, and docs.captchaai.com's error pages do
// not show the action), so WriteThreadsInfo answers both readings a client
// may make of it: the three fields at the top of the object, and the same
// object as json=1's request beside status 1.
const ActionThreadsInfo = "threadsinfo"

// ThreadsInfo is an account's threads: its plan's, those its captchas
// hold, and those free.
type ThreadsInfo struct {
	Threads        int `json:"threads"`
	WorkingThreads int `json:"working_threads"`
	FreeThreads    int `json:"free_threads"`
}

// WriteThreadsInfo answers threadsinfo: the fields as a JSON object; under
// json=1 also status 1 and the object as request.
func WriteThreadsInfo(w http.ResponseWriter, jsonOut bool, ti ThreadsInfo) {
	var v any = ti
	if jsonOut {
		req, _ := json.Marshal(ti)
		v = struct {
			Status  int             `json:"status"`
			Request json.RawMessage `json:"request"`
			ThreadsInfo
		}{1, req, ti}
	}
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}
