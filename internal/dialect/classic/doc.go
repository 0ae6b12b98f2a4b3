// Package classic is the in.php/res.php dialect of the solving services
// (CaptchaAI's API, 2captcha's classic one): the codes its replies carry and
// what each means, the shape of its replies, and the 60-per-3-s rule on
// in.php. The gateway (which speaks it to its callers), the emulator
// (solver/fakeapi, which speaks it to the worker in tests) and the
// solver's client (which reads it from the service) all take them from
// here, so no side keeps its own copy of a rule; the JSON task dialect
// (createTask/getTaskResult) is the sibling package createtask.
//
// It holds facts about the dialect, never a decision of the queue's: what
// the worker does with a code (its retry class) stays in package solver,
// what the gateway answers for a task in package gateway.
//
// Sources: the services' error tables (docs.captchaai.com/pages/err_handling,
// 2captcha.com/api-docs/error-codes), CaptchaAI's examples
// (github.com/CaptchaAI/CaptchaAI-Examples, articles/*/python/solve.py) and
// 2captcha's SDK (github.com/2captcha/2captcha-python, twocaptcha/solver.py);
// each code's own source is beside it and in its fixture,
// solver/testdata/service/replies.json.
package classic
