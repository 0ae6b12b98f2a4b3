// The providers file: which solving services a worker uses, how each is
// reached and paid, and what it is for.

package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/solver"
)

// Dialect is the API a provider speaks.
type Dialect string

// The dialects.
const (
	// Classic is in.php/res.php (CaptchaAI, 2captcha, RuCaptcha,
	// CapMonster Cloud's compatibility endpoint).
	Classic Dialect = "classic"
	// Tasks is the JSON createTask/getTaskResult dialect (Anti-Captcha,
	// CapMonster Cloud, CapSolver, 2captcha API v2, captchaq's gateway):
	// TasksClient.
	Tasks Dialect = "tasks"
)

// Role is what a provider is for.
type Role string

// The roles.
const (
	// Primary providers take every task they solve first.
	Primary Role = "primary"
	// Fallback providers take a task only while every primary that solves
	// its method is out (outage, refused key, no funds).
	Fallback Role = "fallback"
	// Overflow providers take a task that would miss its deadline waiting
	// for a thread of the primaries' plans.
	Overflow Role = "overflow"
)

// Entry is one provider of the providers file.
type Entry struct {
	// Name names the provider in events, outcomes and stats: 1 to 32
	// lower-case letters, digits, '-' or '_', unique in the file.
	Name string `json:"name"`
	// Dialect is the API it speaks: "classic" or "tasks".
	Dialect Dialect `json:"dialect"`
	// BaseURL is the API's root, without /in.php: an absolute http(s) URL
	// without credentials or query.
	BaseURL string `json:"base_url"`
	// Service is the profile of the classic service ("captchaai" or
	// "2captcha"): what its codes mean and which methods it has. Default:
	// from BaseURL's host (solver.ServiceOf). A tasks provider has none: it
	// is classed as a per-solve service, and offers what the dialect has
	// types for.
	Service string `json:"service,omitempty"`
	// KeyEnv names the environment variable that holds the API key, and
	// KeyFile a file holding it: exactly one of the two. The key itself is
	// never in the providers file.
	KeyEnv  string `json:"key_env,omitempty"`
	KeyFile string `json:"key_file,omitempty"`
	// Billing says how the provider is paid.
	Billing Billing `json:"billing"`
	// Methods are the methods the provider is given; each must be one
	// captchaq accepts and the service offers. Default: every method the
	// service offers.
	Methods []string `json:"methods,omitempty"`
	// Role is "primary", "fallback" or "overflow".
	Role Role `json:"role"`
	// Weight, on a primary, is its share of the tasks among the weighted
	// primaries of a method: each task goes first to one of them drawn
	// with probability weight/sum, then to the others, then to the
	// unweighted primaries in the file's order. 0: unweighted (the file's
	// order). At most MaxWeight.
	Weight int `json:"weight,omitempty"`
	// BudgetPerDay caps what the provider is paid a day (UTC), in the
	// prices' currency: a new captcha whose price would take the day's
	// spend past it is not sent there. 0: no cap.
	BudgetPerDay float64 `json:"budget_per_day,omitempty"`
	// MaxInFlight, on a per-solve provider, is how many of its captchas
	// a worker process keeps waiting there without a worker thread each:
	// a captcha such a provider accepted gives its thread (and its plan
	// thread) to the next task, the worker's threads being sized for the
	// thread plan's; past MaxInFlight a captcha keeps its thread, as a
	// plan's does. 0: DefaultMaxInFlight. At most MaxMaxInFlight. A
	// thread plan's captchas always hold their threads: none is set there.
	MaxInFlight int `json:"max_in_flight,omitempty"`
}

// DefaultMaxInFlight is Entry.MaxInFlight's default: at 500 captchas in
// flight the classic client's batch polls, 100 ids a call
// (classic.MaxBatchIDs) once a second (solver.Timing.BatchGap), still ask
// about each every 5 s (solver.DefaultPollInterval), the pace 2captcha
// asks of a captcha not ready ("retry in 5 seconds",
// 2captcha.com/api-docs/limits); a worker holds one at about 60 KiB
// (BENCHMARKS.md, worker memory at 100 solves): some 30 MiB.
const DefaultMaxInFlight = 500

// MaxMaxInFlight is the largest Entry.MaxInFlight: a consumer's default
// cap on the tasks handed out at once (stream.DefaultMaxInFlight).
const MaxMaxInFlight = 10000

// maxInFlight is e's MaxInFlight, its default applied; 0 on a thread
// plan, whose captchas hold their worker threads.
func (e Entry) maxInFlight() int {
	switch {
	case e.Billing.Plan():
		return 0
	case e.MaxInFlight == 0:
		return DefaultMaxInFlight
	}
	return e.MaxInFlight
}

// Billing is how a provider is paid: a thread plan (Threads) or per solve
// (Per1000), exactly one of the two.
type Billing struct {
	// Threads is the plan's concurrent threads (CaptchaAI's plans).
	Threads int `json:"threads,omitempty"`
	// PlanPrice is what the plan costs a month, as the user states it; a
	// solve on the plan costs nothing more (its marginal cost is zero).
	PlanPrice float64 `json:"plan_price,omitempty"`
	// Per1000 is the price of 1000 solves by method, as the user states
	// it from the provider's price list. Every method the provider is
	// given must have a price.
	Per1000 map[string]float64 `json:"per_1000,omitempty"`
}

// Plan reports whether the provider is paid by a thread plan.
func (b Billing) Plan() bool { return b.Threads > 0 }

// Price is what one solve of method costs beyond the plan: its Per1000
// price over 1000, and 0 on a thread plan.
func (b Billing) Price(method string) float64 { return b.Per1000[method] / 1000 }

// MaxWeight is the largest Entry.Weight.
const MaxWeight = 1000

// MaxProviders is the most providers a file may name: a worker keeps a
// client, a key check and an outage probe for each.
const MaxProviders = 64

// File is the providers file: {"providers": [Entry, …]}.
type File struct {
	Providers []Entry `json:"providers"`
	// ProducerBudgetsPerDay caps what each named producer's tasks are paid
	// a day (UTC), over every provider: a task whose price would take its
	// producer's day past the cap ends dead (CodeBudgetExceeded), unpaid.
	// Key "*": every producer not named. A producer without a cap has none.
	ProducerBudgetsPerDay map[string]float64 `json:"producer_budgets_per_day,omitempty"`
}

var (
	namePattern   = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	envVarPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Parse reads a providers file. Unknown fields and every field out of
// range are errors naming the entry (its index and name) and the field.
func Parse(b []byte) (File, error) {
	var raw struct {
		Providers             []json.RawMessage  `json:"providers"`
		ProducerBudgetsPerDay map[string]float64 `json:"producer_budgets_per_day"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return File{}, fmt.Errorf("providers file: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return File{}, fmt.Errorf("providers file: data after the JSON object at byte %d", dec.InputOffset())
	}
	f := File{ProducerBudgetsPerDay: raw.ProducerBudgetsPerDay}
	for i, r := range raw.Providers {
		e, err := parseEntry(r)
		if err != nil {
			return File{}, fmt.Errorf("%s: %w", entryAt(i, e.Name), err)
		}
		f.Providers = append(f.Providers, e)
	}
	return f, f.Validate()
}

// parseEntry reads one entry; on an error, the entry holds what could be
// read of it (its name, to say which it is).
func parseEntry(b []byte) (Entry, error) {
	var e Entry
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		var named struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(b, &named)
		return Entry{Name: named.Name}, err
	}
	return e, nil
}

// entryAt names the i-th entry, called name, in an error.
func entryAt(i int, name string) string {
	at := fmt.Sprintf("providers file: providers[%d]", i)
	if name != "" {
		at += fmt.Sprintf(" (%s)", name)
	}
	return at
}

// Load reads and parses the providers file at path (Parse).
func Load(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, err
	}
	f, err := Parse(b)
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// service is the entry's classic profile; a tasks provider is taken as a
// per-solve service (its ERROR_ZERO_BALANCE means no money).
func (e Entry) service() (solver.Service, error) {
	if e.Dialect == Tasks {
		return solver.TwoCaptcha, nil
	}
	if e.Service == "" {
		return solver.ServiceOf(e.BaseURL), nil
	}
	return solver.ParseService(e.Service)
}

// offered says why service svc is not given method m, if it is not.
func offered(svc solver.Service, m string) error {
	if _, ok := captcha.Lookup(m); !ok {
		return errors.New("not a method captchaq accepts")
	}
	if err := svc.Offers(m, nil); err != nil {
		return fmt.Errorf("not offered by %s", svc)
	}
	return nil
}

// methods is what the entry solves: Methods, or every method svc offers.
func (e Entry) methods(svc solver.Service) []string {
	if len(e.Methods) > 0 {
		return e.Methods
	}
	var out []string
	for _, m := range solver.Methods() {
		if offered(svc, m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// Key reads the entry's API key from its environment variable or file.
// The error names the variable or the file, never the key.
func (e Entry) Key() (string, error) {
	if e.KeyFile != "" {
		b, err := os.ReadFile(e.KeyFile)
		if err != nil {
			return "", fmt.Errorf("provider %s: key_file: %w", e.Name, err)
		}
		if k := strings.TrimSpace(string(b)); k != "" {
			return k, nil
		}
		return "", fmt.Errorf("provider %s: key_file %s: empty", e.Name, e.KeyFile)
	}
	if k := strings.TrimSpace(os.Getenv(e.KeyEnv)); k != "" {
		return k, nil
	}
	return "", fmt.Errorf("provider %s: key_env %s: not set or empty", e.Name, e.KeyEnv)
}
