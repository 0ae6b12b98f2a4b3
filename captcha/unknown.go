// Parameters the method does not know: refused (Validate), named with a
// near known name.

package captcha

import (
	"fmt"
	"slices"
	"strings"
)

// UnknownParam is a parameter its method does not know: Validate refuses
// it.
type UnknownParam struct {
	// Name is the parameter's name.
	Name string
	// Method is the method it was given to.
	Method string
	// Suggest is the known parameter it is a near miss of ("googelkey" for
	// googlekey), or "".
	Suggest string
}

// String reads like `params.googelkey: not a parameter of method
// userrecaptcha (did you mean "googlekey"?)`.
func (u UnknownParam) String() string { return "params." + u.Name + ": " + u.reason() }

// reason is String without the field.
func (u UnknownParam) reason() string {
	s := "not a parameter of method " + u.Method
	if u.Suggest != "" {
		s += fmt.Sprintf(" (did you mean %q?)", u.Suggest)
	}
	return s
}

// UnknownParams returns the parameters of params that methodName does not
// know, sorted by name, each with the known name it is a near miss of (an
// edit distance of at most 2, or the same letters in another case). It
// returns nil for an unknown method: Validate refuses that.
func UnknownParams(methodName string, params map[string]string) []UnknownParam {
	m, ok := byName[methodName]
	if !ok {
		return nil
	}
	var out []UnknownParam
	for n := range params {
		if _, ok := m.params[n]; ok {
			continue
		}
		if _, ok := commonParams[n]; ok || reserved[n] {
			continue
		}
		out = append(out, UnknownParam{Name: n, Method: methodName, Suggest: nearest(n, m.params)})
	}
	slices.SortFunc(out, func(a, b UnknownParam) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// nearest returns the known parameter name closest to n, if close enough to
// be a typo of it.
func nearest(n string, own map[string]param) string {
	names := make([]string, 0, len(own)+len(commonParams))
	for k := range own {
		names = append(names, k)
	}
	for k := range commonParams {
		names = append(names, k)
	}
	return nearestName(n, names)
}

// NearMethod returns the method n is a near miss of ("turnstile" for
// "turnstyle"), or "" when it is near none: an edit distance of at most 2,
// ignoring case.
func NearMethod(n string) string { return nearestName(n, Methods()) }

// nearestName returns the name of names closest to n, if close enough to be
// a typo of it (an edit distance of at most 2, ignoring case, and less than
// n's length); ties go to the name first in order.
func nearestName(n string, names []string) string {
	best, bestD := "", 3
	for _, k := range names {
		d := editDistance(strings.ToLower(n), strings.ToLower(k))
		if d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	if bestD > 2 || bestD >= len(n) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// NotAMethod says, for a name that is not a method of the catalogue, why a
// selection by it matches nothing: "not a method captchaq solves (did you
// mean turnstile?); want one of …", naming the near miss when there is one
// and every method. It returns "" for a method of the catalogue.
func NotAMethod(name string) string {
	if Known(name) {
		return ""
	}
	near := ""
	if m := NearMethod(name); m != "" {
		near = " (did you mean " + m + "?)"
	}
	return "not a method captchaq solves" + near + "; want one of " + strings.Join(Methods(), ", ")
}
