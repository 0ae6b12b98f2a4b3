package solver

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Text returns the solution as text: the token of reCAPTCHA and Turnstile,
// the text of an image, the click:… of a grid. It fails for an object
// (GeeTest).
func (a Answer) Text() (string, error) {
	var s string
	if err := json.Unmarshal(a.Solution, &s); err != nil {
		return "", fmt.Errorf("solver: solution is not text: %w", err)
	}
	return s, nil
}

// Clicks returns the cells of a grid answer "click:1/4/7" (1-based, left to
// right, top to bottom). An answer without clicks ("click:" or "No_matching_images")
// gives an empty slice.
func (a Answer) Clicks() ([]int, error) {
	s, err := a.Text()
	if err != nil {
		return nil, err
	}
	if strings.EqualFold(s, "No_matching_images") {
		return []int{}, nil
	}
	rest, ok := strings.CutPrefix(s, "click:")
	if !ok {
		return nil, fmt.Errorf("solver: grid answer %q does not start with click:", truncate(s, 32))
	}
	out := []int{}
	if rest == "" {
		return out, nil
	}
	for _, f := range strings.Split(rest, "/") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("solver: grid answer %q: bad cell %q", truncate(s, 32), f)
		}
		out = append(out, n)
	}
	return out, nil
}

// GeeTestAnswer is the answer to a GeeTest v3 captcha.
// Every field is non-empty in an answer GeeTest returns without error.
type GeeTestAnswer struct {
	// Challenge is the geetest_challenge to submit with the form.
	Challenge string `json:"challenge"`
	// Validate is the geetest_validate to submit with the form.
	Validate string `json:"validate"`
	// Seccode is the geetest_seccode to submit with the form.
	Seccode string `json:"seccode"`
}

// GeeTest returns the solution as a GeeTest v3 answer.
func (a Answer) GeeTest() (GeeTestAnswer, error) {
	var g GeeTestAnswer
	if err := json.Unmarshal(a.Solution, &g); err != nil {
		return g, fmt.Errorf("solver: solution is not a GeeTest answer: %w", err)
	}
	if g.Challenge == "" || g.Validate == "" || g.Seccode == "" {
		return g, fmt.Errorf("solver: GeeTest answer lacks challenge, validate or seccode")
	}
	return g, nil
}
