// Reports (reportgood, reportbad) go to the provider that solved the
// captcha: a captcha id means nothing to another provider, or names
// another account's captcha there.

package provider

import (
	"context"
	"fmt"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// reporter is a provider's client that reports answers (*solver.Client).
type reporter interface {
	Report(ctx context.Context, captchaID string, good bool) error
}

// methodReporter is one whose call depends on the captcha's method
// (*TasksClient).
type methodReporter interface {
	Report(ctx context.Context, method, captchaID string, good bool) error
}

// Report reports captcha id, solved by no named provider (an outcome of a
// worker without providers), to the first classic provider, as a worker
// without providers would have.
func (s *Set) Report(ctx context.Context, id string, good bool) error {
	return s.ReportOn(ctx, "", "", id, good)
}

// ReportOn reports captcha id, a captcha of method, to provider name,
// which solved it (the outcome's provider; "" for the first classic
// provider): a tasks provider with the call it documents for the method
// (TasksClient.Report). A provider the Set does not have, or one whose
// client sends no reports, is answered ERROR_REPORT_NOT_RECORDED with
// nothing sent.
func (s *Set) ReportOn(ctx context.Context, name, method, id string, good bool) error {
	for _, m := range s.members {
		r, ok := m.Client.(reporter)
		mr, byMethod := m.Client.(methodReporter)
		switch {
		case name == "" && ok, m.Entry.Name == name && ok:
			return r.Report(ctx, id, good)
		case m.Entry.Name == name && byMethod:
			return mr.Report(ctx, method, id, good)
		case m.Entry.Name == name:
			return notRecorded(fmt.Errorf("provider %s: its dialect (%s) sends no reports", name, m.Entry.Dialect))
		}
	}
	if name == "" {
		return notRecorded(fmt.Errorf("no classic provider to report to"))
	}
	return notRecorded(fmt.Errorf("provider %s: not one of this worker's providers", name))
}

func notRecorded(err error) error {
	return &solver.Error{Code: classic.CodeReportNotRecorded, Class: retry.Permanent, Op: "report", Err: err}
}
