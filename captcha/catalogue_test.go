package captcha

import (
	"slices"
	"testing"
	"time"
)

// TestCatalogueTimings pins each kind's first poll and longest wait, and
// each method's token lifetime, to their sources (cited at the entries in
// methods.go): a change to one is a change to what the service asks.
func TestCatalogueTimings(t *testing.T) {
	t.Parallel()
	const s = time.Second
	kinds := []struct {
		kind           string
		first, maxWait time.Duration
		lane           Lane
		source         string
	}{
		{KindRecaptcha, 15 * s, 180 * s, LaneSlow, "example sleeps 15 (2captcha: 10-20); 180 s captchaq's own"},
		{KindRecaptchaV3, 10 * s, 180 * s, LaneFast, "2captcha's 10-20 for reCAPTCHA, low end; 180 s captchaq's own"},
		{KindTurnstile, 5 * s, 120 * s, LaneFast, "2captcha: at least 5 s; MAX_TIMEOUT 120"},
		{KindGeeTest, 15 * s, 120 * s, LaneSlow, "example sleeps 15; MAX_TIMEOUT 120"},
		{KindGeeTestV4, 15 * s, 120 * s, LaneSlow, "example sleeps 15; MAX_TIMEOUT 120"},
		{KindHCaptcha, 15 * s, 120 * s, LaneSlow, "example sleeps 15; MAX_TIMEOUT 120"},
		{KindCloudflare, 20 * s, 120 * s, LaneSlow, "example sleeps 20; MAX_TIMEOUT 120"},
		{KindImage, 5 * s, 120 * s, LaneFast, "2captcha: at least 5 s; MAX_TIMEOUT 120"},
		{KindGrid, 5 * s, 120 * s, LaneFast, "2captcha: at least 5 s; MAX_TIMEOUT 120"},
		{KindBLS, 15 * s, 120 * s, LaneFast, "example sleeps 15; MAX_TIMEOUT 120"},
		{KindFriendly, 5 * s, 120 * s, LaneFast, "2captcha: at least 5 s; MAX_TIMEOUT 120"},
	}
	var names []string
	for _, k := range kinds {
		names = append(names, k.kind)
		if got := FirstPoll(k.kind); got != k.first {
			t.Errorf("FirstPoll(%s) = %v, want %v (%s)", k.kind, got, k.first, k.source)
		}
		if got := MaxWait(k.kind); got != k.maxWait {
			t.Errorf("MaxWait(%s) = %v, want %v (%s)", k.kind, got, k.maxWait, k.source)
		}
		if e, _ := LookupKind(k.kind); e.Lane != k.lane {
			t.Errorf("%s travels in lane %q, want %q", k.kind, e.Lane, k.lane)
		}
	}
	if got := Kinds(); !slices.Equal(got, names) {
		t.Errorf("Kinds() = %v, want %v", got, names)
	}
	// 2captcha's "at least 5 seconds" and the examples' MAX_TIMEOUT = 120.
	if UnknownFirstPoll != 5*s || UnknownMaxWait != 120*s {
		t.Errorf("an unknown kind's timings are %v and %v, want 5s (2captcha: at least 5 s) and 2m0s (MAX_TIMEOUT 120)", UnknownFirstPoll, UnknownMaxWait)
	}
	if FirstPoll("funcaptcha") != UnknownFirstPoll || MaxWait("funcaptcha") != UnknownMaxWait {
		t.Errorf("an unknown kind polls at %v and gives up at %v, want %v and %v",
			FirstPoll("funcaptcha"), MaxWait("funcaptcha"), UnknownFirstPoll, UnknownMaxWait)
	}

	lifetimes := map[string]time.Duration{
		"userrecaptcha":        120 * s, // Google: two minutes
		"turnstile":            300 * s, // Cloudflare: 300 s
		"geetest":              120 * s, // captchaq's own
		"hcaptcha":             120 * s, // captchaq's own
		"cloudflare_challenge": 300 * s, // captchaq's own
		"post":                 300 * s, // captchaq's own
		"base64":               300 * s, // captchaq's own
		"bls":                  300 * s, // captchaq's own
		"friendly_captcha":     120 * s, // captchaq's own
	}
	got := TokenLifetimes()
	if len(got) != len(lifetimes) {
		t.Errorf("TokenLifetimes() = %v, want %v", got, lifetimes)
	}
	for m, want := range lifetimes {
		if got[m] != want {
			t.Errorf("token lifetime of %s = %v, want %v", m, got[m], want)
		}
	}
}

// TestCatalogueEntries checks each entry is whole and agrees with itself:
// a kind shared by two methods says the same in both, only a method's
// first kind holds without a condition, and an answer a batch reply cannot
// carry whole is not taken from one.
func TestCatalogueEntries(t *testing.T) {
	t.Parallel()
	seen := map[string]Kind{}
	for _, m := range catalogue {
		if len(m.Kinds) == 0 || m.TokenLifetime <= 0 || len(m.params) == 0 {
			t.Errorf("%s: entry lacks kinds, a token lifetime or parameters", m.Name)
			continue
		}
		for i, k := range m.Kinds {
			if (i == 0) != (k.If == Cond{}) {
				t.Errorf("%s: kind %s has condition %+v; only the first has none", m.Name, k.Name, k.If)
			}
			if k.If.Param != "" {
				if _, ok := m.params[k.If.Param]; !ok {
					t.Errorf("%s: kind %s depends on %s, not a parameter of the method", m.Name, k.Name, k.If.Param)
				}
			}
			if k.FirstPoll <= 0 || k.MaxWait <= k.FirstPoll || (k.Lane != LaneSlow && k.Lane != LaneFast) {
				t.Errorf("%s: kind %s has first poll %v, longest wait %v, lane %q", m.Name, k.Name, k.FirstPoll, k.MaxWait, k.Lane)
			}
			if prev, ok := seen[k.Name]; ok && prev != (Kind{Name: k.Name, If: prev.If, Lane: k.Lane, FirstPoll: k.FirstPoll, MaxWait: k.MaxWait, Batch: k.Batch, NotOn2Captcha: k.NotOn2Captcha}) {
				t.Errorf("kind %s says %+v for %s and %+v before", k.Name, k, m.Name, prev)
			}
			seen[k.Name] = k
			switch {
			case (m.Answer == AnswerObject || m.Answer == AnswerCookie) && k.Batch != BatchNone:
				t.Errorf("%s: a batch reply cannot carry its answer whole, yet batch %d", m.Name, k.Batch)
			case m.UserAgentField != "" && k.Batch == BatchAnswer:
				t.Errorf("%s: a batch reply lacks the %s its answer is bound to, yet it is taken from one", m.Name, m.UserAgentField)
			}
		}
		if got, _ := Lookup(m.Name); got.Name != m.Name {
			t.Errorf("Lookup(%s) = %q", m.Name, got.Name)
		}
	}
	if LaneOf("userrecaptcha", map[string]string{"version": "v3"}) != LaneFast || LaneOf("userrecaptcha", nil) != LaneSlow || LaneOf("nope", nil) != LaneFast {
		t.Error("LaneOf does not follow the kinds")
	}
	if UserAgentField("turnstile") != "useragent" || UserAgentField("cloudflare_challenge") != "user_agent" || UserAgentField("hcaptcha") != "" {
		t.Error("UserAgentField does not follow the entries")
	}
}
