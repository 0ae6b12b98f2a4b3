// Package sdktest drives captchaq's gateway with the solving service's own
// SDKs, which the product does not depend on: the official Go SDK
// (github.com/2captcha/2captcha-go) and, through Node, the official
// JavaScript SDK (@2captcha/captcha-solver) in the classic dialect and
// CapMonster Cloud's and Anti-Captcha's official clients
// (@zennolab_com/capmonstercloud-client, @antiadmin/anticaptchaofficial) in
// the JSON task dialect, all installed by `npm ci` in js/.
// It is a module of its own so that only these tests need them; it builds
// captchaq from the working tree (replace ../..). Run: `go test ./...` here
// (.ci/run runs `npm ci` in js/ first).
package sdktest
