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

// tlsServer starts a nats-server that requires TLS, with a certificate for
// 127.0.0.1 signed by a fresh CA, and returns its URL and the CA's PEM file.
func tlsServer(t *testing.T) (string, string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "captchaq test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600))

	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		TLS: true, TLSTimeout: 2, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12,
			Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}})
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return fmt.Sprintf("tls://127.0.0.1:%d", ns.Addr().(*net.TCPAddr).Port), caFile
}

// --tls-ca verifies the server's certificate; without it the connection is
// refused with an error that says why.
func TestTLSCA(t *testing.T) {
	t.Parallel()
	url, caFile := tlsServer(t)
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
