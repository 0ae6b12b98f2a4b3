package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// testCA is a fresh certificate authority for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // its certificate, PEM
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "captchaq test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return &testCA{cert: cert, key: key, file: file}
}

// issue signs a certificate for 127.0.0.1 for the given use.
func (ca *testCA) issue(t *testing.T, serial int64, use x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{use},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// writePair writes a certificate and its key as PEM files.
func writePair(t *testing.T, c tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile
}

// tlsServer starts a nats-server that requires TLS, with a certificate for
// 127.0.0.1 signed by ca; with clientCA, it also requires a client
// certificate signed by it (mutual TLS, nats.conf's "verify: true").
func tlsServer(t *testing.T, ca, clientCA *testCA) string {
	t.Helper()
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{ca.issue(t, 2, x509.ExtKeyUsageServerAuth)}}
	if clientCA != nil {
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		tc.ClientCAs = x509.NewCertPool()
		tc.ClientCAs.AddCert(clientCA.cert)
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		TLS: true, TLSVerify: clientCA != nil, TLSTimeout: 2, TLSConfig: tc})
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return fmt.Sprintf("tls://127.0.0.1:%d", ns.Addr().(*net.TCPAddr).Port)
}

// --tls-ca verifies the server's certificate; without it the connection is
// refused with an error that says why.
func TestTLSCA(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	url, caFile := tlsServer(t, ca, nil), ca.file
	ctx := context.Background()

	nf := natsFlags{url: url, tlsCA: caFile}
	nc, _, err := nf.connect(ctx, "tls-test")
	require.NoError(t, err)
	require.True(t, nc.TLSRequired())
	nc.Close()

	_, _, err = (&natsFlags{url: url}).connect(ctx, "tls-test")
	require.ErrorContains(t, err, "certificate")

	_, _, err = (&natsFlags{url: url, tlsCA: filepath.Join(t.TempDir(), "missing.pem")}).connect(ctx, "tls-test")
	require.ErrorContains(t, err, "--tls-ca")
}

// --tls-cert and --tls-key present a client certificate to a server that
// requires one; without it, or with one the server's CA did not sign, the
// connection is refused with an error that says what to set.
func TestTLSClientCertificate(t *testing.T) {
	t.Parallel()
	ca, clientCA := newTestCA(t), newTestCA(t)
	url := tlsServer(t, ca, clientCA)
	ctx := context.Background()
	cert, key := writePair(t, clientCA.issue(t, 3, x509.ExtKeyUsageClientAuth))

	nc, _, err := (&natsFlags{url: url, tlsCA: ca.file, tlsCert: cert, tlsKey: key}).connect(ctx, "tls-test")
	require.NoError(t, err)
	require.True(t, nc.TLSRequired())
	nc.Close()

	_, _, err = (&natsFlags{url: url, tlsCA: ca.file}).connect(ctx, "tls-test")
	require.ErrorContains(t, err, "likely for want of a client certificate (mutual TLS): set --tls-cert and --tls-key")

	strangerCert, strangerKey := writePair(t, newTestCA(t).issue(t, 4, x509.ExtKeyUsageClientAuth))
	_, _, err = (&natsFlags{url: url, tlsCA: ca.file, tlsCert: strangerCert, tlsKey: strangerKey}).connect(ctx, "tls-test")
	require.ErrorContains(t, err, "the server refused the client certificate --tls-cert "+strangerCert)

	_, _, err = (&natsFlags{url: url, tlsCA: ca.file, tlsCert: cert}).connect(ctx, "tls-test")
	require.ErrorContains(t, err, "--tls-cert and --tls-key go together")
	_, _, err = (&natsFlags{url: url, tlsCA: ca.file, tlsCert: cert, tlsKey: cert}).connect(ctx, "tls-test")
	require.ErrorContains(t, err, "--tls-key "+cert)
}
