// Package createtask is the JSON task dialect of the solving services: POST
// /createTask, /getTaskResult, /getBalance and the report calls, each a JSON
// object in and a JSON object out, as Anti-Captcha, CapMonster Cloud,
// CapSolver and 2captcha's API v2 serve it. It is named after the call that
// defines it, as package classic is the in.php/res.php dialect's: the
// gateway (which serves it to its callers) and the solver's JSON client
// (which speaks it to a provider) take it from here, so neither keeps its
// own copy of a type name, a field or a code.
//
// It holds the dialect's facts and the translation between them and
// captchaq's own words, never a decision of the queue's:
//
//   - the requests and replies (api.go), usable from both sides: the server
//     decodes what a client encodes with the same types;
//   - the task types, their aliases, and what each is in captchaq's
//     catalogue (types.go, task.go: Task.Request; taskfor.go: its inverse, TaskFor);
//   - each type's solution shape and its inverse (solution.go);
//   - the error codes, their numbers, and the mapping from the in.php/res.php
//     codes captchaq's outcomes carry (codes.go).
//
// Where the providers differ, a reader accepts every form they publish (a
// task type in either case or under its other provider's name, a taskId as a
// number or a string of digits, a GeeTest v4 captcha id under gt, captchaId
// or initParameters.captcha_id); a writer writes the form the most SDKs read.
//
// Sources, each also beside what it backs: Anti-Captcha's API docs
// (anti-captcha.com/apidoc: methods/createTask, methods/getTaskResult,
// errors, task-types/*) and its official npm client
// (github.com/anti-captcha/anticaptcha-npm, index.js); CapMonster Cloud's
// docs (docs.capmonster.cloud, zennolab.atlassian.net/wiki/spaces/APIS) and
// official JS client (github.com/ZennoLab/capmonstercloud-client-js, src/);
// CapSolver's docs (docs.capsolver.com/guide: api-gettaskresult, api-error,
// api-feedback, antibots/cloudflare_turnstile); 2captcha's API v2 docs
// (2captcha.com/api-docs: error-codes, report-incorrect).
package createtask
