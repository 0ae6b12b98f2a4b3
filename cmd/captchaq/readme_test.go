package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestREADMEShellBlocks runs the README's walkthrough as a newcomer would,
// with a binary built from this checkout, against the emulator, in a
// temporary directory. The conventions, which the README keeps:
//
//   - Blocks fenced ```sh are run, in order, in one bash (set -e), so that a
//     server started with & in one block serves the next. Blocks fenced
//     otherwise (```bash: the first screen, whose `go test ./...` is this
//     very suite, and the paid API) are shown, not run.
//   - A line starting with `go build -o captchaq ./cmd/captchaq` is done by
//     the test before the script (the script runs outside the checkout,
//     with the binary and testdata/ copied in).
//   - A line whose comment says `# exits N` must exit N; any other line
//     must exit 0.
//   - The README's fixed ports are the defaults a newcomer uses; here they
//     would clash with other tests, so the test moves them: the server's
//     127.0.0.1:4222 through the environment every command reads
//     (CAPTCHAQ_LISTEN for a server without a config file, CAPTCHAQ_NATS for the
//     others), and the emulator's 127.0.0.1:8088 by replacing that text
//     with a free port.
//   - Nothing may reach the paid service: the environment starts without
//     CAPTCHAAI_API_KEY or any CAPTCHAQ_ variable, and HTTPS goes to a proxy
//     that refuses every connection, so a command that called the real API
//     would fail or wait, and the test with it.
func TestREADMEShellBlocks(t *testing.T) {
	t.Parallel()
	readme, dir := readmeWorkdir(t, "-ldflags", "-X main.buildVersion=v0.0.0-readme")
	blocks := shellBlocks(readme, "sh")
	require.GreaterOrEqual(t, len(blocks), 3, "the README's walkthrough is in ```sh blocks")

	// The version comes from the build.
	v, err := exec.Command(filepath.Join(dir, "captchaq"), "--version").Output()
	require.NoError(t, err)
	require.Regexp(t, `^captchaq v0\.0\.0-readme \(go1\.`, string(v))

	natsPort, emuPort := freePort(t), freePort(t)
	script := readmeScript(t, blocks, map[string]string{"127.0.0.1:8088": fmt.Sprintf("127.0.0.1:%d", emuPort)})

	got := runDocBlocks(t, "the README", dir, script,
		fmt.Sprintf("CAPTCHAQ_LISTEN=127.0.0.1:%d", natsPort), fmt.Sprintf("CAPTCHAQ_NATS=nats://127.0.0.1:%d", natsPort))
	t.Logf("output:\n%s", got)
	for _, want := range []string{
		"2 of 30 tasks not solved",               // run and submit --wait: the demo fails on purpose
		"captchaq trace demo-007",                // run names the commands to try
		`"id":"demo-007","status":"solved"`,      // the replay is solved
		"would delete 1 dead letter(s)",          // dead purge --dry-run
		"purged 1 dead letter(s)",                // dead purge ID --yes
		"ERROR_WRONG_GOOGLEKEY",                  // dead ls: perm-fail
		"no CAPTCHAAI_API_KEY: solving with the", // run used its emulator
	} {
		require.Contains(t, got, want)
	}
	require.NotContains(t, got, "real API", "nothing reaches the paid service")
	// What the README says the emulator was paid is what it printed as
	// the walkthrough stopped it.
	money := 0
	for _, block := range shellBlocks(readme, "text") {
		if !strings.HasPrefix(block, "fakeapi: ") {
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
			require.Contains(t, got, line, "the README's money lines")
			money++
		}
	}
	require.Positive(t, money, "the README shows what the emulator was paid")
}

// shellBlocks returns the contents of the blocks fenced ```lang.
func shellBlocks(md, lang string) []string {
	var blocks []string
	var cur *strings.Builder
	sc := bufio.NewScanner(strings.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && line == "```"+lang:
			cur = &strings.Builder{}
		case cur != nil && line == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return blocks
}

// readmeWorkdir returns the README and a directory to run its walkthrough
// in, outside the checkout: captchaq built there (with buildFlags) and
// testdata/tasks.jsonl copied in.
func readmeWorkdir(t *testing.T, buildFlags ...string) (readme, dir string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	dir = t.TempDir()
	build := exec.Command("go", append(append([]string{"build"}, buildFlags...), "-o", filepath.Join(dir, "captchaq"), "./cmd/captchaq")...)
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "testdata"), 0o755))
	tasks, err := os.ReadFile(filepath.Join(root, "testdata", "tasks.jsonl"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "testdata", "tasks.jsonl"), tasks, 0o600))
	return string(b), dir
}

var exitsRe = regexp.MustCompile(`^(.*?)\s+# exits (\d+)\b.*$`)

// heredocRe finds a here-document a line starts (<<'END' or <<END): its
// terminator.
var heredocRe = regexp.MustCompile(`<<-?'?([A-Za-z_]+)'?`)

// readmeScript turns the blocks into one bash script, as the conventions of
// TestREADMEShellBlocks say.
func readmeScript(t *testing.T, blocks []string, replace map[string]string) string {
	t.Helper()
	return docScript(blocks, replace, false)
}

// pastedScript turns the blocks into one bash script as a reader pastes
// them into a shell: without set -e, a failed line does not stop the
// next, and a line's exit status is shown, not required.
func pastedScript(t *testing.T, blocks []string, replace map[string]string) string {
	t.Helper()
	return docScript(blocks, replace, true)
}

func docScript(blocks []string, replace map[string]string, pasted bool) string {
	var b strings.Builder
	if !pasted {
		b.WriteString("set -e\n")
	}
	for _, block := range blocks {
		for old, repl := range replace {
			block = strings.ReplaceAll(block, old, repl)
		}
		heredoc := "" // the terminator of the here-document the lines are in
		for _, line := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
			if heredoc != "" {
				// A here-document's lines are its text, echoed by nothing.
				b.WriteString(line + "\n")
				if line == heredoc {
					heredoc = ""
				}
				continue
			}
			if m := heredocRe.FindStringSubmatch(line); m != nil {
				heredoc = m[1]
			}
			if strings.HasPrefix(line, "go build -o captchaq ./cmd/captchaq") {
				continue
			}
			if m := exitsRe.FindStringSubmatch(line); m != nil && !pasted {
				fmt.Fprintf(&b, "echo %s\nset +e; ( %s ); rc=$?; set -e\n[ $rc -eq %s ] || { echo \"README: expected exit %s, got $rc: \"%s >&2; exit 1; }\n",
					shellQuote("$ "+line), m[1], m[2], m[2], shellQuote(m[1]))
				continue
			}
			fmt.Fprintf(&b, "echo %s\n%s\n", shellQuote("$ "+line), line)
		}
	}
	return b.String()
}

// shellQuote quotes s for bash, as is.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
