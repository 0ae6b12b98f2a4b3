// Account calls: the balance and reports on answers.

package solver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

// Balance returns the account's balance as the service reports it
// (action=getbalance). On CaptchaAI, billed by threads, it is informational.
func (c *Client) Balance(ctx context.Context) (float64, error) {
	body := c.form(url.Values{"action": {classic.ActionGetBalance}})
	status, b, _, err := c.exchange(ctx, "res.php", body, formType, func(b []byte) bool {
		_, perr := strconv.ParseFloat(string(bytes.TrimSpace(b)), 64)
		return perr == nil || c.apiReply(b)
	})
	if err != nil {
		return 0, err
	}
	// The plain-text balance is a bare number ("50.2500"), not OK|…
	// (2captcha/2captcha-go, GetBalance).
	if f, perr := strconv.ParseFloat(string(bytes.TrimSpace(b)), 64); status == http.StatusOK && perr == nil {
		return f, nil
	}
	r, err := c.callParsed("res.php", status, b, "")
	if err != nil {
		return 0, err
	}
	f, perr := strconv.ParseFloat(strings.TrimSpace(r.text), 64)
	if perr != nil {
		return 0, c.scrub(newError("res.php", CodeBadReply, fmt.Errorf("%w: balance %q is not a number", errBadReply, truncate(redact(r.text, c.key), 64))))
	}
	return f, nil
}

// Report tells the service whether the answer of captcha id was accepted by
// the site (reportgood) or rejected (reportbad). It succeeds when the service
// answers OK_REPORT_RECORDED.
func (c *Client) Report(ctx context.Context, id string, good bool) error {
	action := classic.ActionReportBad
	if good {
		action = classic.ActionReportGood
	}
	r, err := c.call(ctx, "res.php", c.form(url.Values{"action": {action}, "id": {id}}), formType)
	if CodeOf(err) == CodeReportRecorded {
		return nil // the plain-text form: a bare OK_REPORT_RECORDED
	}
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.CaptchaID = id
		}
		return err
	}
	if r.text != CodeReportRecorded {
		return c.scrub(newError("res.php", CodeBadReply, fmt.Errorf("%w: %s answered %q, want %s", errBadReply, action, truncate(redact(r.text, c.key), 64), CodeReportRecorded)).about(id))
	}
	return nil
}
