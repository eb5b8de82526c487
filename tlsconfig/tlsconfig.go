// Package tlsconfig owns the TLS of a fabriq cluster: it loads a node's
// certificate and key and the cluster's certificate authority (CA), and
// makes the tls.Config of each kind of connection.
//
//   - Server: the client port and the HTTP port. Clients check the node's
//     certificate against the CA and the host name they dialled.
//   - PeerServer and PeerClient: the Raft port, between nodes. Both sides
//     present their certificate and check the other's against the CA: a
//     peer without a certificate the CA signed cannot join a Raft group,
//     vote, or call the node. Nodes dial each other by address, so these
//     check the chain to the CA, not a host name: the CA must sign the
//     cluster's nodes and nothing else.
//   - Client: what clients use, the CA alone (Client).
//
// TLS 1.2 is the oldest version accepted.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files names a node's PEM files.
type Files struct {
	Cert string // the node's certificate (with any intermediates after it)
	Key  string // its private key
	CA   string // the cluster's CA certificates
}

// Node is a node's certificate and its cluster's CA.
type Node struct {
	cert tls.Certificate
	pool *x509.CertPool
}

// Load reads a node's files; all three are required.
func Load(f Files) (*Node, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, errors.New("tlsconfig: TLS needs a certificate, its key and the cluster's CA (--tls-cert-file, --tls-key-file, --tls-ca-file)")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: certificate %s with key %s: %w", f.Cert, f.Key, err)
	}
	pool, err := loadPool(f.CA)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: certificate %s: %w", f.Cert, err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: intermediates(cert), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("tlsconfig: certificate %s is not signed by the CA of %s: %w", f.Cert, f.CA, err)
	}
	return &Node{cert: cert, pool: pool}, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsconfig: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tlsconfig: no PEM certificate in %s", path)
	}
	return pool, nil
}

func intermediates(c tls.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, der := range c.Certificate[1:] {
		if cert, err := x509.ParseCertificate(der); err == nil {
			pool.AddCert(cert)
		}
	}
	return pool
}

// Server returns the config of the client and HTTP ports.
func (n *Node) Server() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{n.cert}}
}

// PeerServer returns the config of the Raft port: a peer must present a
// certificate the CA signed.
func (n *Node) PeerServer() *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS12,
		Certificates:     []tls.Certificate{n.cert},
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: n.verifyPeer,
	}
}

// PeerClient returns the config with which the node dials its peers'
// Raft ports (and, where it must, their client ports): it presents its
// certificate and checks theirs against the CA.
func (n *Node) PeerClient() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{n.cert},
		// The chain is checked by verifyPeer: peers are dialled by address,
		// and their certificates need not name it.
		InsecureSkipVerify: true,
		VerifyConnection:   n.verifyPeer,
	}
}

// verifyPeer checks that the peer's certificate chains to the CA.
func (n *Node) verifyPeer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tlsconfig: the peer presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: n.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	if err != nil {
		return fmt.Errorf("tlsconfig: the peer's certificate is not the cluster's: %w", err)
	}
	return nil
}

// Client returns a client's config: nodes' certificates are checked
// against the CA in caFile, or the system's roots when caFile is empty,
// and against the host name dialled.
func Client(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}
