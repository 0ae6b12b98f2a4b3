package createtask

import "strings"

// Kind is what a task type asks for, in captchaq's terms: which method of
// the catalogue (package captcha) serves it, and how.
type Kind int

// The kinds the dialect's task types come in.
const (
	KindRecaptchaV2 Kind = iota + 1
	KindRecaptchaV2Enterprise
	KindRecaptchaV3
	KindTurnstile
	KindGeeTest
	KindHCaptcha
	KindImage
	KindFriendlyCaptcha
)

// TaskType is a task type of the dialect: its name as the providers spell
// it and what it asks for.
type TaskType struct {
	// Name is the type as its first source below spells it.
	Name string
	Kind Kind
	// Proxy says the type carries the task's proxy (proxyType,
	// proxyAddress, …): the solving happens through it.
	Proxy bool
	// Enterprise says the type asks for reCAPTCHA Enterprise whatever its
	// isEnterprise (CapSolver's ReCaptchaV3Enterprise types).
	Enterprise bool
}

// types are the task types captchaq's methods serve, under every name the
// providers give them. A type is looked up in any case: CapSolver spells
// Anti-Captcha's RecaptchaV2TaskProxyless ReCaptchaV2TaskProxyLess
// (docs.capsolver.com/guide/getting-started), so the names below are not
// repeated in CapSolver's case.
var types = []TaskType{
	// Anti-Captcha: anticaptcha-npm index.js (solveRecaptchaV2Proxyless,
	// solveRecaptchaV2ProxyOn), apidoc/task-types/RecaptchaV2TaskProxyless.
	{Name: "RecaptchaV2TaskProxyless", Kind: KindRecaptchaV2},
	{Name: "RecaptchaV2Task", Kind: KindRecaptchaV2, Proxy: true},
	// CapMonster Cloud's names for the same (capmonstercloud-client-js
	// src/TaskType.ts; also Anti-Captcha's former ones).
	{Name: "NoCaptchaTaskProxyless", Kind: KindRecaptchaV2},
	{Name: "NoCaptchaTask", Kind: KindRecaptchaV2, Proxy: true},
	// Anti-Captcha: index.js solveRecaptchaV2Enterprise*, with
	// enterprisePayload; CapMonster: TaskType.RecaptchaV2EnterpriseTask.
	{Name: "RecaptchaV2EnterpriseTaskProxyless", Kind: KindRecaptchaV2Enterprise},
	{Name: "RecaptchaV2EnterpriseTask", Kind: KindRecaptchaV2Enterprise, Proxy: true},
	// Anti-Captcha: index.js solveRecaptchaV3 (minScore, pageAction) and
	// solveRecaptchaV3Enterprise (the same type with isEnterprise);
	// CapMonster: TaskType.RecaptchaV3TaskProxyless.
	{Name: "RecaptchaV3TaskProxyless", Kind: KindRecaptchaV3},
	// CapSolver's others (docs.capsolver.com/guide/captcha/ReCaptchaV3:
	// ReCaptchaV3Task, ReCaptchaV3EnterpriseTask, their ProxyLess forms);
	// CapMonster's RecaptchaV3EnterpriseTask (capmonstercloud-client-js
	// src/TaskType.ts, RecaptchaV3EnterpriseRequest: websiteURL,
	// websiteKey, pageAction, minScore) is the second in another case.
	{Name: "ReCaptchaV3Task", Kind: KindRecaptchaV3, Proxy: true},
	{Name: "ReCaptchaV3EnterpriseTaskProxyLess", Kind: KindRecaptchaV3, Enterprise: true},
	{Name: "ReCaptchaV3EnterpriseTask", Kind: KindRecaptchaV3, Proxy: true, Enterprise: true},
	// Anti-Captcha: index.js solveTurnstileProxyless/ProxyOn (action, cData,
	// chlPageData); CapMonster: TaskType.TurnstileTask (proxy optional);
	// CapSolver: AntiTurnstileTaskProxyLess with metadata.action and
	// metadata.cdata (docs.capsolver.com/guide/antibots/cloudflare_turnstile).
	{Name: "TurnstileTaskProxyless", Kind: KindTurnstile},
	{Name: "TurnstileTask", Kind: KindTurnstile, Proxy: true},
	{Name: "AntiTurnstileTaskProxyLess", Kind: KindTurnstile},
	// Anti-Captcha: index.js solveGeeTest*/solveGeeTestV4* (version 4,
	// the captcha id as gt, initParameters); CapMonster: TaskType.GeeTestTask
	// (GeeTestRequestBase: version '3' or '4').
	{Name: "GeeTestTaskProxyless", Kind: KindGeeTest},
	{Name: "GeeTestTask", Kind: KindGeeTest, Proxy: true},
	// Anti-Captcha: index.js solveHCaptchaProxyless/ProxyOn; CapMonster:
	// TaskType.HCaptchaTaskProxyless, HCaptchaTask.
	{Name: "HCaptchaTaskProxyless", Kind: KindHCaptcha},
	{Name: "HCaptchaTask", Kind: KindHCaptcha, Proxy: true},
	// Anti-Captcha: index.js solveImage; CapMonster: TaskType.ImageToTextTask.
	{Name: "ImageToTextTask", Kind: KindImage},
	// Anti-Captcha: apidoc/task-types/FriendlyCaptchaTaskProxyless and
	// FriendlyCaptchaTask (websiteURL, websiteKey; the proxy fields);
	// CapSolver: docs.capsolver.com/guide/captcha/FriendlyCaptcha (the
	// first).
	{Name: "FriendlyCaptchaTaskProxyless", Kind: KindFriendlyCaptcha},
	{Name: "FriendlyCaptchaTask", Kind: KindFriendlyCaptcha, Proxy: true},
}

var byType = func() map[string]TaskType {
	m := make(map[string]TaskType, len(types))
	for _, t := range types {
		m[strings.ToLower(t.Name)] = t
	}
	return m
}()

// LookupType returns the task type named name, in any case.
func LookupType(name string) (TaskType, bool) {
	t, ok := byType[strings.ToLower(name)]
	return t, ok
}

// Types returns every task type the dialect serves, in the order of their
// sources.
func Types() []TaskType { return append([]TaskType(nil), types...) }
