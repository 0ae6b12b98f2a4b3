package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAcrossSitesRunsAsWritten runs docs/across-sites.md's "Try it on one
// machine" as written: its blocks fenced ```sh, in order, in one bash (set
// -e, as TestREADMEShellBlocks runs the README's), in a temporary directory
// holding the shipped nats.conf and testdata/leaf/, with real processes: a
// captchaq binary built from this checkout and nats-server built from the
// very module version captchaq embeds (go.mod), so that the site runs
// `nats-server -c testdata/leaf/site.conf` as the page says. What the test
// changes, as the page says too: the fixed ports 4222 (the hub's, in
// nats.conf), 7422 (the hub's leaf node port), 4223 (the site's) and 8088
// (the page's emulator) are moved to free ones; the emulator and its
// settings are the page's own. Once with each site option:
// site.conf as written, and site-js.conf in its place.
//
// The task is solved once, from the site, through the hub's one queue:
// the page's emulator says it was paid once, the hub's store has the CAPTCHA stream, and a
// site with JetStream of its own has none.
func TestAcrossSitesRunsAsWritten(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	page, err := os.ReadFile(filepath.Join(root, "docs", "across-sites.md"))
	require.NoError(t, err)
	blocks := shellBlocks(string(page), "sh")
	require.Len(t, blocks, 5, "the page's walkthrough: passwords, hub, site, the emulator, worker and producer")

	// The page makes the store key with openssl, as nats.conf says to;
	// .ci/run installs it, and in CI (CI=true) a missing one fails.
	if _, err := exec.LookPath("openssl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("openssl, which the page's walkthrough runs, is not installed: %v", err)
		}
		t.Skipf("openssl, which the page's walkthrough runs, is not installed (.ci/run installs it): %v", err)
	}

	bin := buildSitesBinaries(t, root)

	for _, conf := range []string{"site.conf", "site-js.conf"} {
		t.Run(conf, func(t *testing.T) {
			t.Parallel()
			hubPort, leafPort, sitePort := freePort(t), freePort(t), freePort(t)
			dir := t.TempDir()
			// The shipped files, with only the fixed ports moved.
			copyFile(t, filepath.Join(root, "nats.conf"), filepath.Join(dir, "nats.conf"),
				"127.0.0.1:4222", fmt.Sprintf("127.0.0.1:%d", hubPort))
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "testdata", "leaf"), 0o755))
			copyFile(t, filepath.Join(root, "testdata", "leaf", "hub.conf"), filepath.Join(dir, "testdata", "leaf", "hub.conf"),
				"127.0.0.1:7422", fmt.Sprintf("127.0.0.1:%d", leafPort))
			for _, f := range []string{"site.conf", "site-js.conf"} {
				copyFile(t, filepath.Join(root, "testdata", "leaf", f), filepath.Join(dir, "testdata", "leaf", f))
			}

			script := readmeScript(t, blocks, map[string]string{
				"127.0.0.1:7422":          fmt.Sprintf("127.0.0.1:%d", leafPort),
				"4223":                    fmt.Sprint(sitePort),
				"testdata/leaf/site.conf": "testdata/leaf/" + conf,
				"127.0.0.1:8088":          fmt.Sprintf("127.0.0.1:%d", freePort(t)),
			})

			// Only PATH: every other setting is the page's own.
			got := runDocBlocks(t, "the page", dir, script,
				"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))

			// solve printed the answer: the last line after its command.
			_, after, ok := strings.Cut(got, "captchaq solve --method")
			require.True(t, ok, got)
			lines := strings.Split(strings.TrimSpace(after), "\n")
			require.GreaterOrEqual(t, len(lines), 2, got)
			require.NotEmpty(t, strings.TrimSpace(lines[1]), got)
			// The page's emulator says what it was paid as it stops: once.
			require.Contains(t, got, "fakeapi: 1 captchas accepted, 0 refunded as unsolvable", "paid once:\n%s", got)
			require.Contains(t, got, "fakeapi: no task was paid for more than once", got)

			// The queue is the hub's; a site with JetStream has none.
			require.DirExists(t, filepath.Join(dir, "data", "jetstream", "jetstream", "CAPTCHAQ", "streams", "CAPTCHA"))
			if conf == "site-js.conf" {
				require.DirExists(t, filepath.Join(dir, "data", "site-jetstream"))
				matches, err := filepath.Glob(filepath.Join(dir, "data", "site-jetstream", "jetstream", "*", "streams", "*"))
				require.NoError(t, err)
				require.Empty(t, matches, "a stream at the site")
			}
		})
	}
}

// copyFile copies src to dst, replacing each old text with its new one
// (pairs).
func copyFile(t *testing.T, src, dst string, oldNew ...string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	s := string(b)
	for i := 0; i+1 < len(oldNew); i += 2 {
		require.Contains(t, s, oldNew[i], src)
		s = strings.ReplaceAll(s, oldNew[i], oldNew[i+1])
	}
	require.NoError(t, os.WriteFile(dst, []byte(s), 0o600))
}

// TestAcrossSitesSaysHowToGetNatsServer: the page's walkthrough runs
// nats-server, which the README never installs; the page says how, at the
// version captchaq embeds (go.mod), as TestAcrossSitesRunsAsWritten builds it.
func TestAcrossSitesSaysHowToGetNatsServer(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	page, err := os.ReadFile(filepath.Join(root, "docs", "across-sites.md"))
	require.NoError(t, err)
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^\s*github\.com/nats-io/nats-server/v2 (v\S+)`).FindSubmatch(mod)
	require.NotNil(t, m, "go.mod requires nats-server")
	_, section, ok := strings.Cut(string(page), "## Try it on one machine")
	require.True(t, ok)
	require.Contains(t, section, "go install github.com/nats-io/nats-server/v2@"+string(m[1]),
		"the walkthrough says how to install the nats-server it runs, at go.mod's version")
}

// TestAcrossSitesNamesEveryVariable: every environment variable the shipped
// hub and site configs read (and nats.conf, which the hub includes) is
// named on the page, so that a reader sets them all.
func TestAcrossSitesNamesEveryVariable(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	page, err := os.ReadFile(filepath.Join(root, "docs", "across-sites.md"))
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(root, "testdata", "leaf", "*.conf"))
	require.NoError(t, err)
	require.Len(t, files, 3)
	files = append(files, filepath.Join(root, "nats.conf"))
	varRe := regexp.MustCompile(`(?m)^[^#]*\$(CAPTCHAQ_[A-Z_]+)`)
	seen := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n") {
			for _, m := range varRe.FindAllStringSubmatch(line, -1) {
				seen[m[1]] = true
				require.Contains(t, string(page), m[1], "%s reads $%s; the page does not name it", f, m[1])
			}
		}
	}
	require.Len(t, seen, 8, "the variables: %v", seen)
}
