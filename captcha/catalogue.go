// The catalogue: one entry per method captchaq solves, and what every other
// package asks of it.

package captcha

import (
	"maps"
	"slices"
	"time"
)

// Lane groups methods by how long they take, so that a backlog of slow ones
// never starves fast ones (stream/wire.Lane carries it on a task's subject).
type Lane string

// The lanes.
const (
	// LaneSlow holds the kinds of 15–60 s solves, whose first poll
	// CaptchaAI's examples wait 15–20 s for.
	LaneSlow Lane = "slow"
	// LaneFast holds the kinds of 2–15 s solves.
	LaneFast Lane = "fast"
)

// Batch says what a batch poll (res.php action=get&ids) does for a kind.
type Batch int

const (
	// BatchAnswer: a batch reply carries the answer.
	BatchAnswer Batch = iota
	// BatchReady: a batch reply says the answer is ready, and the answer is
	// then fetched on its own, since only a single reply carries the user
	// agent the token is bound to.
	BatchReady
	// BatchNone: polled on its own only, since a batch reply would lose
	// part of the answer (an object, a cookie without its user agent).
	BatchNone
)

// Answer is the shape of a method's answer.
type Answer int

const (
	// AnswerToken is a token string the page submits.
	AnswerToken Answer = iota
	// AnswerText is the text read off an image (or a grid's cells).
	AnswerText
	// AnswerObject is a JSON object of several values (GeeTest's
	// challenge, validate and seccode).
	AnswerObject
	// AnswerCookie is a cookie value (cf_clearance) that works only with
	// the user agent that earned it.
	AnswerCookie
)

// Cond is a parameter's value that makes a request of a method another
// kind ("version" "v3" for reCAPTCHA v3). The zero Cond always holds.
type Cond struct {
	// Param is the parameter's name.
	Param string
	// Value is the value that makes the request the other kind.
	Value string
}

func (c Cond) holds(params map[string]string) bool {
	return c.Param == "" || params[c.Param] == c.Value
}

// Kind groups requests whose solve times are alike: it keys the poller's
// timings and what the queue learns of solve times.
type Kind struct {
	// Name is the kind's name (KindRecaptcha, …).
	Name string
	// If is what makes a request this kind rather than its method's
	// first; the zero Cond for the first.
	If Cond
	// Lane is the lane its tasks travel in.
	Lane Lane
	// FirstPoll is how long after submission the first res.php call is
	// made, until the kind's solve times are learned.
	FirstPoll time.Duration
	// MaxWait is how long after submission the client gives up.
	MaxWait time.Duration
	// Batch is what a batch poll does for it.
	Batch Batch
	// NotOn2Captcha says why 2captcha does not take this kind as captchaq
	// sends it, or "" when it does.
	NotOn2Captcha string
}

// Method is one API method's entry in the catalogue.
type Method struct {
	// Name is the method as the service names it (in.php's method).
	Name string
	// Kinds are the kinds its requests can be: the first, or the first
	// of the others whose If holds.
	Kinds []Kind
	// TokenLifetime is how long an answer is good for once solved.
	TokenLifetime time.Duration
	// Answer is the shape of its answer.
	Answer Answer
	// UserAgentField names the reply field holding the user agent the
	// answer is bound to ("useragent", "user_agent"), or "" when it is
	// bound to none.
	UserAgentField string

	params map[string]param
	cross  func(method string, p map[string]string) *ValidationError
}

// Timings of a kind the catalogue does not know.
const (
	// UnknownFirstPoll is 2captcha's least wait before the first poll.
	UnknownFirstPoll = 5 * time.Second
	// UnknownMaxWait is the examples' MAX_TIMEOUT.
	UnknownMaxWait = 120 * time.Second
)

var (
	byName = func() map[string]*Method {
		m := make(map[string]*Method, len(catalogue))
		for i := range catalogue {
			m[catalogue[i].Name] = &catalogue[i]
		}
		return m
	}()
	kindNames []string
	byKind    = func() map[string]Kind {
		m := map[string]Kind{}
		for _, e := range catalogue {
			for _, k := range e.Kinds {
				if _, ok := m[k.Name]; !ok {
					kindNames = append(kindNames, k.Name)
				}
				m[k.Name] = k
			}
		}
		return m
	}()
)

// Lookup returns the entry of method name. Callers must not modify its
// Kinds.
func Lookup(name string) (Method, bool) {
	m, ok := byName[name]
	if !ok {
		return Method{}, false
	}
	return *m, true
}

// Methods returns the names of the methods Validate accepts, sorted.
func Methods() []string {
	return slices.Sorted(maps.Keys(byName))
}

// Known reports whether name is a method of the catalogue.
func Known(name string) bool {
	_, ok := byName[name]
	return ok
}

// kindOf returns the kind a request of m with params is.
func (m *Method) kindOf(params map[string]string) Kind {
	for _, k := range m.Kinds[1:] {
		if k.If.holds(params) {
			return k
		}
	}
	return m.Kinds[0]
}

// KindOf returns the kind of a request: what groups requests whose solve
// times are alike. Unknown methods are their own kind.
func KindOf(methodName string, params map[string]string) string {
	m, ok := byName[methodName]
	if !ok {
		return methodName
	}
	return m.kindOf(params).Name
}

// LookupKind returns what the catalogue says of kind.
func LookupKind(kind string) (Kind, bool) {
	k, ok := byKind[kind]
	return k, ok
}

// Kinds lists every kind KindOf returns for a method Validate accepts.
func Kinds() []string { return slices.Clone(kindNames) }

// LaneOf returns the lane a request travels in: its kind's, LaneFast for a
// method the catalogue does not know.
func LaneOf(methodName string, params map[string]string) Lane {
	m, ok := byName[methodName]
	if !ok {
		return LaneFast
	}
	return m.kindOf(params).Lane
}

// FirstPoll returns the delay from submission to the first poll of kind:
// UnknownFirstPoll for a kind the catalogue does not know.
func FirstPoll(kind string) time.Duration {
	if k, ok := byKind[kind]; ok {
		return k.FirstPoll
	}
	return UnknownFirstPoll
}

// MaxWait returns how long after submission a captcha of kind is given up:
// UnknownMaxWait for a kind the catalogue does not know.
func MaxWait(kind string) time.Duration {
	if k, ok := byKind[kind]; ok {
		return k.MaxWait
	}
	return UnknownMaxWait
}

// BatchOf returns what a batch poll does for kind: BatchAnswer for a kind
// the catalogue does not know.
func BatchOf(kind string) Batch { return byKind[kind].Batch }

// TokenLifetimes returns every method's token lifetime, by method: a new
// map each call.
func TokenLifetimes() map[string]time.Duration {
	out := make(map[string]time.Duration, len(catalogue))
	for _, m := range catalogue {
		out[m.Name] = m.TokenLifetime
	}
	return out
}

// UserAgentField returns the reply field naming the user agent an answer of
// method is bound to, or "".
func UserAgentField(methodName string) string {
	if m, ok := byName[methodName]; ok {
		return m.UserAgentField
	}
	return ""
}
