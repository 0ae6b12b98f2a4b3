package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// walkthroughs names, for each page that has one, the test that runs its
// walkthrough: the page's blocks fenced ```sh, run as written, as
// TestREADMEShellBlocks says. A block fenced otherwise is shown, not run: a
// production recipe with secrets to fill in, the paid API, another tool.
var walkthroughs = map[string]string{
	"README.md":            "TestREADMEShellBlocks",
	"docs/across-sites.md": "TestAcrossSitesRunsAsWritten",
	"docs/cluster.md":      "TestClusterWalkthroughRunsAsWritten",
	"docs/dashboard.md":    "TestDashboardWalkthroughRunsAsWritten",
	"docs/gateway.md":      "TestGatewayWalkthroughRunsAsWritten",
	"docs/providers.md":    "TestProvidersWalkthroughRunsAsWritten",
	"docs/security.md":     "TestSecurityBlockEndsWhenTheServerCannotStart",
}

// onPath are the pages whose walkthrough says how to put captchaq on the
// PATH; the others run the binary built in the repository's root.
var onPath = map[string]bool{"docs/across-sites.md": true}

// bareCaptchaq finds captchaq run as a command by its bare name: after the
// line's start, a pipe or list operator, or variable assignments.
var bareCaptchaq = regexp.MustCompile(`(^|[;&|(]\s*)([A-Z_]+=\S*\s+)*captchaq\s`)

// Every page with a ```sh block (a walkthrough, which a reader on a fresh
// clone follows literally) is run by a test named in walkthroughs, and
// runs captchaq as ./captchaq, the binary its first line builds, unless it
// puts captchaq on the PATH.
func TestEveryWalkthroughIsRun(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	pages = append(pages, filepath.Join(root, "README.md"))
	var tests strings.Builder
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		tests.Write(b)
	}
	seen := 0
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		require.NoError(t, err)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		blocks := shellBlocks(string(b), "sh")
		test, listed := walkthroughs[rel]
		if len(blocks) == 0 {
			require.False(t, listed, "%s has no ```sh block, yet walkthroughs names %s as running it", rel, test)
			continue
		}
		seen++
		require.True(t, listed, "%s has ```sh blocks that no test runs: run them in a test and name it in walkthroughs, or fence them ```bash if they are not meant to run as written", rel)
		require.Contains(t, tests.String(), "func "+test+"(t *testing.T)", "%s: walkthroughs names %s, which is not a test here", rel, test)
		if onPath[rel] {
			continue
		}
		for _, block := range blocks {
			for _, line := range strings.Split(block, "\n") {
				code, _, _ := strings.Cut(line, " # ")
				require.False(t, bareCaptchaq.MatchString(code), "%s runs captchaq by its bare name, which a fresh clone does not have on its PATH: %q", rel, line)
			}
		}
	}
	require.Equal(t, len(walkthroughs), seen)
}

// Every walkthrough says, in the section that holds its first ```sh block
// and before that block, that it pays nothing (the emulator, or no service at all), and marks
// the step that pays as "**The paid variant", apart from the blocks that
// run as written.
func TestEveryWalkthroughSaysItPaysNothingAndMarksThePaidStep(t *testing.T) {
	t.Parallel()
	for page := range walkthroughs {
		b, err := os.ReadFile(filepath.Join("..", "..", page))
		require.NoError(t, err)
		md := string(b)
		before, _, ok := strings.Cut(md, "\n```sh\n")
		require.True(t, ok, page)
		if i := strings.LastIndex(before, "\n## "); i >= 0 {
			before = before[i:]
		}
		intro := strings.Join(strings.Fields(before), " ")
		require.Regexp(t, `(?i)no key|nothing (is )?paid|no money`, intro, "%s: its walkthrough's section says, before it, that it pays nothing", page)
		require.Contains(t, md, "**The paid variant", "%s marks the step that pays", page)
	}
}
