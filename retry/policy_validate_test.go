package retry

import (
	"strings"
	"testing"
	"time"
)

// Out-of-range fields are errors that name the field; zero fields are the
// defaults and valid.
func TestPolicyValidateNamesTheField(t *testing.T) {
	if err := (Policy{}).Validate(); err != nil {
		t.Fatalf("zero policy: %v", err)
	}
	for want, p := range map[string]Policy{
		"MaxAttempts":         {MaxAttempts: -1},
		"InitialInterval":     {InitialInterval: -time.Second},
		"Multiplier":          {Multiplier: 0.5},
		"MaxInterval -":       {MaxInterval: -time.Second},
		"is below":            {InitialInterval: time.Minute, MaxInterval: time.Second},
		"RandomizationFactor": {RandomizationFactor: 1},
		"CapacityMaxDelay":    {CapacityDelay: time.Minute, CapacityMaxDelay: time.Second},
	} {
		err := p.Validate()
		if err == nil {
			t.Errorf("%+v: no error", p)
			continue
		}
		name := want
		if name == "MaxInterval -" {
			name = "MaxInterval"
		}
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%+v: %v does not name %s", p, err, name)
		}
	}
}
