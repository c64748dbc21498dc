package runtime

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/splitflow/splitflow/runtime/internal/statustest"
	"github.com/splitflow/splitflow/runtime/status"
)

// Bad status server options are configuration errors of Execute, before
// anything runs, and never show the token.
func TestHTTPOptionErrors(t *testing.T) {
	noCert := &tls.Config{MinVersion: tls.VersionTLS12}
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"token without a server", []Option{WithHTTP("", status.WithToken(statustest.Token))}, "status.WithToken without an address"},
		{"TLS without a server", []Option{WithHTTP("", status.WithTLS(selfSignedTLS(t)))}, "status.WithTLS without an address"},
		{"short token", []Option{WithHTTP("127.0.0.1:0", status.WithToken("short-tok"))}, "fewer than 16"},
		{"token with a space", []Option{WithHTTP("127.0.0.1:0", status.WithToken(statustest.Token+" x"))}, "cannot carry"},
		{"TLS without a certificate", []Option{WithHTTP("127.0.0.1:0", status.WithTLS(noCert))}, "has no certificate"},
		// A token beside it does not excuse the certificate: every
		// handshake would fail, and the server could be neither read nor
		// stopped.
		{"TLS without a certificate, with a token", []Option{WithHTTP("127.0.0.1:0", status.WithTLS(noCert), status.WithToken(statustest.Token))}, "has no certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := NewEnvironment(append([]Option{WithLogger(discardLogger())}, tc.opts...)...)
			SinkTo(FromSource(env, &rangeSrc{splits: 1, perSplit: 1, readerFailAt: -1}, "n"), newCollectSink[int64]())
			err := env.Execute(t.Context(), "bad http options")
			if !errors.Is(err, ErrInvalidGraph) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Execute: %v; want an ErrInvalidGraph saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), statustest.Token) || strings.Contains(err.Error(), "short-tok") {
				t.Errorf("the error shows the token: %v", err)
			}
		})
	}
}

// selfSignedTLS is a server config with a certificate for 127.0.0.1.
func selfSignedTLS(t *testing.T) *tls.Config {
	t.Helper()
	cfg, _ := selfSignedTLSAndPool(t)
	return cfg
}

func selfSignedTLSAndPool(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "status server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}, pool
}

// A running job with status.WithTLS and status.WithToken: the server speaks
// only HTTPS; the page and the metrics need no token; POST
// /api/v1/job/stop is refused without the token and with it stops the job
// gracefully, Execute returning ErrStopped.
func TestHTTPTLSServerStopsJobWithToken(t *testing.T) {
	cfg, pool := selfSignedTLSAndPool(t)
	j := startLiveJob(t, WithHTTP("127.0.0.1:0", status.WithTLS(cfg), status.WithToken(statustest.Token)))
	base := "https://" + j.addr
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}
	for _, path := range []string{"/", "/metrics", "/api/v1/job"} {
		if code, body, _ := statustest.Send(t, client, http.MethodGet, base+path, ""); code != http.StatusOK {
			t.Errorf("GET %s over TLS without a token: %d %.200q", path, code, body)
		}
	}
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if res, err := plain.Get("http://" + j.addr + "/healthz"); err == nil {
		_ = res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Error("the TLS server answered plain HTTP with 200")
		}
	}
	if code, _, _ := statustest.Send(t, client, http.MethodPost, base+"/api/v1/job/stop", ""); code != http.StatusUnauthorized {
		t.Fatalf("stop without a token: %d, want 401", code)
	}
	select {
	case err := <-j.done:
		t.Fatalf("the job ended after a refused stop: %v", err)
	default:
	}
	if code, body, _ := statustest.Send(t, client, http.MethodPost, base+"/api/v1/job/stop", "Bearer "+statustest.Token); code != http.StatusAccepted {
		t.Fatalf("stop with the token: %d %q, want 202", code, body)
	}
	select {
	case err := <-j.done:
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("Execute after the stop endpoint: %v, want ErrStopped (a graceful stop)", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the job still ran 20s after POST /api/v1/job/stop")
	}
	j.cancel()
	j.cancel = nil // Execute has returned; nothing left for stop
}

// A token served over plain HTTP on an address other hosts reach is
// readable on the network: the server says so at start, without the token.
func TestHTTPWarnsOfTokenOverPlainHTTP(t *testing.T) {
	var logs statustest.LockedBuffer
	j := startLiveJob(t, WithHTTP("0.0.0.0:0", status.WithToken(statustest.Token)), WithLogger(slogText(&logs)))
	j.stop(t)
	if !strings.Contains(logs.String(), "over plain HTTP") {
		t.Errorf("no warning of a token over plain HTTP on %s:\n%s", j.addr, logs.String())
	}
	if strings.Contains(logs.String(), statustest.Token) {
		t.Error("the log shows the token")
	}
}
