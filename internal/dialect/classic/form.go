package classic

// The dialect's two endpoints and res.php's actions (2captcha-python,
// twocaptcha/api.py in_ and res; CaptchaAI-Examples, articles/*/python/
// solve.py: SUBMIT_URL in.php, RESULT_URL res.php with action=get).
const (
	// SubmitPath is in.php's path: a captcha is submitted, its id answered.
	SubmitPath = "in.php"
	// ResultPath is res.php's path: the actions below.
	ResultPath = "res.php"

	// ActionGet polls a captcha (id) or several (ids: a batch poll).
	ActionGet = "get"
	// ActionGetBalance answers the account's balance, bare.
	ActionGetBalance = "getbalance"
	// ActionReportGood and ActionReportBad report an answer as right or
	// wrong; both answer OK_REPORT_RECORDED.
	ActionReportGood = "reportgood"
	ActionReportBad  = "reportbad"
)
