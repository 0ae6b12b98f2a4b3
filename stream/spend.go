package stream

import (
	"cmp"
	"math"
	"slices"
)

// SpendStats is what one provider was paid for one producer's tasks solved
// in a Stats window, when workers solve through providers (package
// solver/provider): one row of Stats.Spend. It is part of the wire
// contract of `captchaq stats --json`.
type SpendStats struct {
	// Provider names the provider that solved them (Outcome.Provider).
	Provider string `json:"provider"`
	// Producer is the name of the producer that submitted them
	// (ClientConfig.Name; a gateway key's producer); "" when unnamed, and
	// in the rows of Stats.SpendByMethod.
	Producer string `json:"producer"`
	// Method is the tasks' method in the rows of Stats.SpendByMethod, ""
	// (absent) in those of Stats.Spend.
	Method string `json:"method,omitempty"`
	// Solves counts the tasks solved; PlanSolves those of them solved on a
	// thread plan (cost basis "plan"), paid by the month and costing
	// nothing more here.
	Solves     int `json:"solves"`
	PlanSolves int `json:"plan_solves"`
	// Cost is the sum of the solves' costs (Outcome.Cost) in the currency
	// of the providers file's prices, to a millionth.
	Cost float64 `json:"cost"`
}

// spendTally sums the solved outcomes' costs by provider and producer, or
// by provider and method.
type spendTally map[[3]string]*SpendStats

// add counts one solve of producer's task, or of a task of method, on
// provider at cost.
func (t spendTally) add(provider, producer, method string, cost float64, basis string) {
	if provider == "" {
		return // a worker without providers
	}
	k := [3]string{provider, producer, method}
	s := t[k]
	if s == nil {
		s = &SpendStats{Provider: provider, Producer: producer, Method: method}
		t[k] = s
	}
	s.Solves++
	if basis == "plan" {
		s.PlanSolves++
	}
	s.Cost += cost
}

// rows are the tally's rows by provider, then producer or method; nil when
// empty.
func (t spendTally) rows() []SpendStats {
	var out []SpendStats
	for _, s := range t {
		r := *s
		r.Cost = math.Round(r.Cost*1e6) / 1e6
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b SpendStats) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Producer, b.Producer), cmp.Compare(a.Method, b.Method))
	})
	return out
}
