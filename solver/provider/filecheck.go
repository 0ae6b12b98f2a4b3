package provider

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/captchaq/captchaq/solver"
)

// The providers file's checks: each refusal names the entry and the field.

// Validate says what is wrong with the file: the first entry and field
// out of range, or what the entries lack together (a primary).
func (f File) Validate() error {
	switch {
	case len(f.Providers) == 0:
		return errors.New("providers file: no providers")
	case len(f.Providers) > MaxProviders:
		return fmt.Errorf("providers file: %d providers: at most %d", len(f.Providers), MaxProviders)
	}
	names := map[string]bool{}
	accounts := map[string]int{}
	primary := false
	for i, e := range f.Providers {
		at := entryAt(i, e.Name)
		if err := e.Validate(); err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		if names[e.Name] {
			return fmt.Errorf("%s: name: named twice", at)
		}
		names[e.Name] = true
		account := strings.TrimRight(strings.ToLower(e.BaseURL), "/") + " " + e.KeyEnv + " " + e.KeyFile
		if j, ok := accounts[account]; ok {
			return fmt.Errorf("%s: base_url, key: the same account as providers[%d] (%s)", at, j, f.Providers[j].Name)
		}
		accounts[account] = i
		primary = primary || e.Role == Primary
	}
	if !primary {
		return errors.New("providers file: no provider has role primary")
	}
	for _, p := range slices.Sorted(maps.Keys(f.ProducerBudgetsPerDay)) {
		if p == "" {
			return errors.New(`providers file: producer_budgets_per_day[""]: a producer's name, or "*" for every other`)
		}
		if err := checkBudget(f.ProducerBudgetsPerDay[p]); err != nil {
			return fmt.Errorf("providers file: producer_budgets_per_day[%q] %w", p, err)
		}
	}
	return nil
}

// checkBudget checks a day's cap.
func checkBudget(b float64) error {
	if b < 0 || math.IsNaN(b) || math.IsInf(b, 0) {
		return fmt.Errorf("%g: want a cap of 0 (none) or more", b)
	}
	return nil
}

// Validate says what is wrong with the entry, naming the field. The key is
// never read here (Key reads it).
func (e Entry) Validate() error {
	switch {
	case !namePattern.MatchString(e.Name):
		return fmt.Errorf("name %q: 1 to 32 lower-case letters, digits, '-' or '_'", e.Name)
	case e.Dialect == Tasks && e.Service != "":
		return fmt.Errorf("service %q: a profile of the classic dialect; the tasks dialect has none", e.Service)
	case e.Dialect != Classic && e.Dialect != Tasks:
		return fmt.Errorf("dialect %q: want %q or %q", e.Dialect, Classic, Tasks)
	}
	if err := checkBaseURL(e.BaseURL); err != nil {
		return fmt.Errorf("base_url: %w", err)
	}
	svc, err := e.service()
	if err != nil {
		return fmt.Errorf("service %q: want one of %v", e.Service, solver.Services())
	}
	switch {
	case e.KeyEnv == "" && e.KeyFile == "":
		return errors.New("key_env, key_file: neither is set; name where the API key is")
	case e.KeyEnv != "" && e.KeyFile != "":
		return errors.New("key_env, key_file: both are set; name one")
	case e.KeyEnv != "" && (!envVarPattern.MatchString(e.KeyEnv) || looksLikeKey(e.KeyEnv)):
		// Not echoed: what is not a variable's name may be the key itself.
		return errors.New("key_env: not an environment variable's name, or one that looks like an API key (16 or more letters and digits, no '_'); the key itself never goes in this file")
	}
	for i, m := range e.Methods {
		if err := offered(svc, m); err != nil {
			return fmt.Errorf("methods[%d] %q: %w", i, m, err)
		}
	}
	if err := e.Billing.validate(e.methods(svc)); err != nil {
		return fmt.Errorf("billing.%w", err)
	}
	switch e.Role {
	case Primary, Fallback:
	case Overflow:
		if e.Billing.Plan() {
			return errors.New("role overflow: an overflow provider is paid per solve (billing.per_1000), not by a thread plan")
		}
	default:
		return fmt.Errorf("role %q: want %q, %q or %q", e.Role, Primary, Fallback, Overflow)
	}
	switch {
	case e.Weight < 0 || e.Weight > MaxWeight:
		return fmt.Errorf("weight %d: want 1 to %d, or 0 (unweighted: the file's order)", e.Weight, MaxWeight)
	case e.Weight > 0 && e.Role != Primary:
		return fmt.Errorf("weight %d: a share of the tasks among primaries; a %s provider takes only what they leave", e.Weight, e.Role)
	}
	if err := checkBudget(e.BudgetPerDay); err != nil {
		return fmt.Errorf("budget_per_day %w", err)
	}
	switch {
	case e.MaxInFlight < 0 || e.MaxInFlight > MaxMaxInFlight:
		return fmt.Errorf("max_in_flight %d: want 1 to %d, or 0 (the default, %d)", e.MaxInFlight, MaxMaxInFlight, DefaultMaxInFlight)
	case e.MaxInFlight > 0 && e.Billing.Plan():
		return fmt.Errorf("max_in_flight %d: a thread plan's captchas each hold a worker thread (--threads is sized for the plan); max_in_flight caps a per-solve provider's (billing.per_1000)", e.MaxInFlight)
	}
	if e.BudgetPerDay > 0 && e.Billing.Plan() {
		return fmt.Errorf("budget_per_day %g: a thread plan is paid by the month, its solves cost nothing each; a budget caps a per-solve provider (billing.per_1000)", e.BudgetPerDay)
	}
	return nil
}

// validate checks the billing of a provider given methods.
func (b Billing) validate(methods []string) error {
	switch {
	case b.Threads < 0:
		return fmt.Errorf("threads %d: want a plan of 1 thread or more", b.Threads)
	case b.Threads > 0 && len(b.Per1000) > 0:
		return errors.New("threads, per_1000: both are set; a provider is paid by a plan or per solve")
	case b.Threads == 0 && len(b.Per1000) == 0:
		return errors.New("threads, per_1000: neither is set; say how the provider is paid")
	case b.PlanPrice < 0 || math.IsNaN(b.PlanPrice) || math.IsInf(b.PlanPrice, 0):
		return fmt.Errorf("plan_price %g: want 0 or more", b.PlanPrice)
	case b.PlanPrice > 0 && b.Threads == 0:
		return errors.New("plan_price: set without a plan (threads)")
	}
	for _, m := range slices.Sorted(maps.Keys(b.Per1000)) {
		if !slices.Contains(methods, m) {
			return fmt.Errorf("per_1000[%q]: not a method this provider is given (%s)", m, strings.Join(methods, ", "))
		}
		if p := b.Per1000[m]; p < 0 || math.IsNaN(p) || math.IsInf(p, 0) {
			return fmt.Errorf("per_1000[%q] %g: want a price of 0 or more", m, p)
		}
	}
	if b.Threads == 0 {
		for _, m := range methods {
			if _, ok := b.Per1000[m]; !ok {
				return fmt.Errorf("per_1000[%q]: missing; every method the provider is given needs its price (or list the methods it takes)", m)
			}
		}
	}
	return nil
}

// looksLikeKey reports whether s looks like an API key (CaptchaAI's,
// 2captcha's and Anti-Captcha's are 32 hexadecimal digits) rather than
// an environment variable's name: 16 or more letters and digits, one of
// them a digit.
func looksLikeKey(s string) bool {
	digit := false
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digit = true
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		default:
			return false
		}
	}
	return digit && len(s) >= 16
}

// checkBaseURL says why u is no API root, if it is not.
func checkBaseURL(u string) error {
	p, err := url.Parse(u)
	switch {
	case err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "":
		return errors.New("not an absolute http(s) URL")
	case p.User != nil:
		return errors.New("carries credentials; the key goes in key_env or key_file")
	case p.RawQuery != "" || p.Fragment != "":
		return errors.New("carries a query or fragment")
	case slices.Contains([]string{"in.php", "res.php", "createTask", "getTaskResult"}, path.Base(p.Path)):
		return fmt.Errorf("ends in the endpoint %s; give the API's root", path.Base(p.Path))
	}
	return nil
}
