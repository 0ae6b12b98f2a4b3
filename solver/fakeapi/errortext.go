package fakeapi

// errorTexts are the descriptions the emulator sends as error_text beside an
// error code in json=1 replies, as the services do ({"status":0,
// "request":"ERROR_…","error_text":"…"}). They paraphrase the services'
// error tables (docs.captchaai.com/api/api-error-handling,
// 2captcha.com/api-docs/error-codes); a code not listed gets a generic text.
var errorTexts = map[string]string{
	"ERROR_WRONG_USER_KEY":           "You've provided key parameter value in incorrect format, it should contain 32 symbols.",
	"ERROR_KEY_DOES_NOT_EXIST":       "The key you've provided does not exist.",
	"ERROR_ZERO_BALANCE":             "You don't have free threads.",
	"ERROR_NO_SLOT_AVAILABLE":        "No slot is available for your captcha now.",
	"ERROR_PAGEURL":                  "pageurl parameter is missing in your request.",
	"ERROR_ZERO_CAPTCHA_FILESIZE":    "Image size is less than 100 bytes.",
	"ERROR_TOO_BIG_CAPTCHA_FILESIZE": "Image size is more than 1024 kB.",
	"ERROR_WRONG_FILE_EXTENSION":     "Image file has unsupported extension. Accepted extensions: jpg, jpeg, gif, png.",
	"ERROR_IMAGE_TYPE_NOT_SUPPORTED": "Server can't recognize image file type.",
	"ERROR_UPLOAD":                   "Server can't get file data from your POST-request.",
	"IP_BANNED":                      "Your IP address is banned due to many frequent attempts to access the server using wrong authorization keys.",
	"ERROR_BAD_TOKEN_OR_PAGEURL":     "The googlekey and pageurl pair is invalid.",
	"ERROR_GOOGLEKEY":                "sitekey in your request is blank or malformed.",
	"ERROR_WRONG_GOOGLEKEY":          "googlekey parameter is missing or has an incorrect format.",
	"ERROR_BAD_PARAMETERS":           "Required parameters are missing or have wrong types.",
	"ERROR_BAD_PROXY":                "The proxy is marked BAD.",
	"ERROR_PROXY_FORMAT":             "Proxy format is incorrect.",
	"MAX_USER_TURN":                  "You made more than 60 requests to in.php within 3 seconds.",
	"ERROR_CAPTCHA_UNSOLVABLE":       "We are unable to solve your captcha.",
	"ERROR_WRONG_ID_FORMAT":          "You've provided captcha ID in wrong format. The ID can contain numbers only.",
	"ERROR_WRONG_CAPTCHA_ID":         "You've provided incorrect captcha ID.",
	"ERROR_EMPTY_ACTION":             "Action parameter is missing or no value is provided.",
	"ERROR_DUPLICATE_REPORT":         "You have already reported this captcha.",
	"ERROR_REPORT_NOT_RECORDED":      "The report was not recorded.",
	"ERROR_TOKEN_EXPIRED":            "The challenge value you provided is expired.",
	"ERROR_PROXY_CONNECTION_FAILED":  "The captcha could not be loaded through the proxy.",
}

// errorText is the error_text of code.
func errorText(code string) string {
	if t, ok := errorTexts[code]; ok {
		return t
	}
	return "The request failed: " + code + "."
}
