package tlsconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newCA(t *testing.T, dir, name string) *ca {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	c := &ca{cert: cert, key: key, file: filepath.Join(dir, name+".pem")}
	writePEM(t, c.file, "CERTIFICATE", der)
	return c
}

func (c *ca) issue(t *testing.T, dir, name string) Files {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	f := Files{Cert: filepath.Join(dir, name+"-cert.pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: c.file}
	writePEM(t, f.Cert, "CERTIFICATE", der)
	writePEM(t, f.Key, "PRIVATE KEY", kder)
	return f
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	cluster, other := newCA(t, dir, "cluster"), newCA(t, dir, "other")
	good := cluster.issue(t, dir, "node")
	if _, err := Load(good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    Files
		says string
	}{
		{Files{Cert: good.Cert, Key: good.Key}, "--tls-ca-file"},
		{Files{Cert: good.Cert, Key: good.Key, CA: other.file}, "not signed by the CA"},
		{Files{Cert: good.Cert, Key: good.Cert, CA: good.CA}, "key"},
		{Files{Cert: good.Cert, Key: good.Key, CA: good.Key}, "no PEM certificate"},
		{Files{Cert: good.Cert, Key: good.Key, CA: filepath.Join(dir, "missing")}, "missing"},
	} {
		if _, err := Load(tc.f); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Load(%+v) = %v, want an error saying %q", tc.f, err, tc.says)
		}
	}
}

// Over real TCP: a peer with a certificate of the cluster's CA is served
// on the Raft port's config; one of another CA, or without one, is not;
// a node's dial refuses a server of another CA.
func TestPeers(t *testing.T) {
	dir := t.TempDir()
	cluster, other := newCA(t, dir, "cluster"), newCA(t, dir, "other")
	server, err := Load(cluster.issue(t, dir, "server"))
	if err != nil {
		t.Fatal(err)
	}
	peer, err := Load(cluster.issue(t, dir, "peer"))
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := Load(other.issue(t, dir, "stranger"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server.PeerServer())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte("x")); err == nil {
				io.Copy(io.Discard, c)
			}
			c.Close()
		}
	}()
	dial := func(cfg *tls.Config) error {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		var b [1]byte
		_, err = io.ReadFull(c, b[:])
		return err
	}
	if err := dial(peer.PeerClient()); err != nil {
		t.Fatalf("a peer of the cluster: %v", err)
	}
	if err := dial(stranger.PeerClient()); err == nil {
		t.Fatal("a peer of another CA was served")
	}
	noCert := peer.PeerClient()
	noCert.Certificates = nil
	if err := dial(noCert); err == nil {
		t.Fatal("a peer without a certificate was served")
	}
	// The node's own dial checks the server against the cluster's CA.
	sln, err := tls.Listen("tcp", "127.0.0.1:0", stranger.PeerServer())
	if err != nil {
		t.Fatal(err)
	}
	defer sln.Close()
	go func() {
		if c, err := sln.Accept(); err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", sln.Addr().String(), peer.PeerClient())
	if err == nil {
		c.Close()
		t.Fatal("a node dialled a server of another CA")
	}
	var cve *tls.CertificateVerificationError
	if !errors.As(err, &cve) && !strings.Contains(err.Error(), "not the cluster's") {
		t.Fatalf("dial of a stranger: %v", err)
	}
	ln.Close()
	<-done
}
