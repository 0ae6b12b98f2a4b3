package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
)

// httpsSection is docs/gateway.md's section on HTTPS a client trusts.
func httpsSection(t *testing.T) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "gateway.md"))
	require.NoError(t, err)
	_, sec, ok := strings.Cut(string(page), "\n## HTTPS a client trusts\n")
	require.True(t, ok, "docs/gateway.md has the section")
	sec, _, _ = strings.Cut(sec, "\n## ")
	return sec
}

// TestGatewayHTTPSWalkthrough runs docs/gateway.md's openssl block (an
// operator CA and the gateway's certificate signed by it), serves
// `captchaq gateway` with that certificate, and checks the clients the
// page names: Go with only ca.pem as its roots, dialing the certificate's
// name; Python requests posting to 'https://' + server + '/in.php' as
// 2captcha-python does, trusting ca.pem through REQUESTS_CA_BUNDLE; Node
// through NODE_EXTRA_CA_CERTS. A client without ca.pem, or dialing a name
// the certificate lacks, is refused; a request naming 2captcha.com or
// api.anti-captcha.com in its Host header is answered as any other. No
// worker runs: nothing is paid.
func TestGatewayHTTPSWalkthrough(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skipf("no openssl: %v", err)
	}
	blocks := shellBlocks(httpsSection(t), "sh")
	require.Len(t, blocks, 1, "the section's commands are one ```sh block")
	dir := t.TempDir()
	runDocBlocks(t, "docs/gateway.md", dir, "set -e\n"+blocks[0])

	natsURL, _, _ := listeningServer(t, stream.Topology{})
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := startProc(t, nil, "gateway", "--nats", natsURL, "--addr", addr, "--keys", gatewayKeyFile(t),
		"--https-cert", filepath.Join(dir, "gateway.pem"), "--https-key", filepath.Join(dir, "gateway.key"))
	p.waitLine("captchaq gateway on https://"+addr, 30*time.Second)

	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	// client dials the gateway whatever name the URL gives, as /etc/hosts
	// would send gateway.internal there; roots nil: the system's.
	client := func(roots *x509.CertPool) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			}}}
	}
	call := func(c *http.Client, method, rawURL, host, body string) (string, error) {
		req, err := http.NewRequest(method, rawURL, strings.NewReader(body))
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	in := "/in.php?" + url.Values{"key": {gatewayKey}, "method": {"turnstile"}, "sitekey": {"0x4AAAAAAABkMYinukE8nzY"},
		"pageurl": {"https://shop.example/checkout"}}.Encode()
	base := fmt.Sprintf("https://gateway.internal:%d", port)
	trusted := client(roots)

	out, err := call(trusted, http.MethodGet, base+in, "", "")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "OK|"), out)

	// A service's name in Host: the gateway answers by path and key.
	out, err = call(trusted, http.MethodGet, base+in, "2captcha.com", "")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "OK|"), out)
	out, err = call(trusted, http.MethodGet, base+"/res.php?key="+gatewayKey+"&action=get&id="+strings.TrimPrefix(out, "OK|"), "2captcha.com", "")
	require.NoError(t, err)
	require.Equal(t, "CAPCHA_NOT_READY", out, "no workers")
	out, err = call(trusted, http.MethodPost, base+"/getBalance", "api.anti-captcha.com", `{"clientKey":"`+gatewayKey+`"}`)
	require.NoError(t, err)
	require.Contains(t, out, `"errorId":0`)

	// Without ca.pem, or by a name the certificate lacks: refused.
	var verr *tls.CertificateVerificationError
	_, err = call(client(nil), http.MethodGet, base+in, "", "")
	require.True(t, errors.As(err, &verr), "%v", err)
	require.ErrorAs(t, verr.Err, new(x509.UnknownAuthorityError))
	_, err = call(trusted, http.MethodGet, fmt.Sprintf("https://other.internal:%d", port)+in, "", "")
	require.True(t, errors.As(err, &verr), "%v", err)
	require.ErrorAs(t, verr.Err, new(x509.HostnameError))

	env := func(kv ...string) []string {
		var out []string
		for _, e := range os.Environ() {
			if k, _, _ := strings.Cut(e, "="); !strings.Contains(strings.ToUpper(k), "PROXY") && !strings.Contains(k, "CA_") {
				out = append(out, e)
			}
		}
		return append(out, kv...)
	}
	run := func(name string, env []string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = env
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	t.Run("python requests", func(t *testing.T) {
		if _, err := run("python3", env(), "-c", "import requests"); err != nil {
			t.Skipf("no python3 with requests: %v", err)
		}
		// As 2captcha-python's ApiClient.in_ posts (twocaptcha/api.py).
		script := `import os, requests
r = requests.post("https://" + os.environ["SERVER"] + "/in.php", data={"key": os.environ["KEY"], "method": "turnstile",
    "sitekey": "0x4AAAAAAABkMYinukE8nzY", "pageurl": "https://shop.example/py"})
print(r.status_code, r.text)`
		vars := []string{"SERVER=" + addr, "KEY=" + gatewayKey}
		out, err := run("python3", env(append(vars, "REQUESTS_CA_BUNDLE="+filepath.Join(dir, "ca.pem"))...), "-c", script)
		require.NoError(t, err, out)
		require.Contains(t, out, "200 OK|")
		out, err = run("python3", env(vars...), "-c", script)
		require.Error(t, err, "without REQUESTS_CA_BUNDLE: %s", out)
		require.Contains(t, out, "CERTIFICATE_VERIFY_FAILED")
	})

	t.Run("node", func(t *testing.T) {
		if _, err := exec.LookPath("node"); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("node is required in CI: %v", err)
			}
			t.Skipf("no node: %v", err)
		}
		script := `require("https").get(process.argv[1], r => { let b = ""; r.on("data", d => b += d); r.on("end", () => console.log(b)) })
  .on("error", e => { console.error(e.code || e.message); process.exit(1) })`
		target := "https://" + addr + in
		out, err := run("node", env("NODE_EXTRA_CA_CERTS="+filepath.Join(dir, "ca.pem")), "-e", script, target)
		require.NoError(t, err, out)
		require.True(t, strings.HasPrefix(out, "OK|"), out)
		out, err = run("node", env(), "-e", script, target)
		require.Error(t, err, "without NODE_EXTRA_CA_CERTS: %s", out)
		require.Contains(t, out, "UNABLE_TO_VERIFY_LEAF_SIGNATURE")
	})
}
