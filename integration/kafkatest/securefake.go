package kafkatest

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// SecureFake is an in-process kfake cluster that speaks only TLS, with a
// certificate for 127.0.0.1 and localhost signed by CA, and, when made
// with a SASL user, only SASL: the unit tests' stand-in for a secure
// cluster (the real broker's is GetSecure).
type SecureFake struct {
	*kfake.Cluster
	// Seeds are the cluster's listen addresses.
	Seeds []string
	// CA signs the cluster's certificate; CAFile holds it in PEM.
	CA     *CA
	CAFile string
}

// NewSecureFake starts a SecureFake, closed when the test ends. A non-empty
// mechanism (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN) enables SASL with user
// as its super user; opts are more kfake options (seed topics).
func NewSecureFake(t testing.TB, mechanism, user, password string, opts ...kfake.Opt) *SecureFake {
	t.Helper()
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("kfake", time.Time{}, time.Time{}, "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := leaf.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	all := []kfake.Opt{kfake.NumBrokers(1), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})}
	if mechanism != "" {
		all = append(all, kfake.EnableSASL(), kfake.Superuser(mechanism, user, password))
	}
	c, err := kfake.NewCluster(append(all, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &SecureFake{Cluster: c, Seeds: c.ListenAddrs(), CA: ca, CAFile: caFile}
}

// WriteCA writes a new CA's certificate to path, for a test that needs a
// CA file and no cluster.
func WriteCA(t testing.TB, path string) *CA {
	t.Helper()
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}
