package tests

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/cluster"
	"github.com/fabriq-io/fabriq/transport"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // its certificate, PEM
}

func newTestCA(t testing.TB, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+"-ca.pem")}
	writePEMFile(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue makes a certificate for 127.0.0.1 and localhost, for servers and
// clients both, and returns its certificate and key files.
func (ca *testCA) issue(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	writePEMFile(t, certFile, "CERTIFICATE", der)
	writePEMFile(t, keyFile, "PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEMFile(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// secureSetup is what a cluster with every protection on needs: TLS on
// every port, gossip encryption, authentication; and what its clients
// need: the CA and an operator's token.
type secureSetup struct {
	nodeArgs   []string
	caFile     string
	secretFile string // signs tokens the cluster accepts
	token      string
}

// secured holds the secure setups of the tests that asked for one
// (secure): startCluster and newClient of those tests use them.
var secured sync.Map // testing.TB → *secureSetup

func secureOf(t testing.TB) *secureSetup {
	if s, ok := secured.Load(t); ok {
		return s.(*secureSetup)
	}
	return nil
}

// secure makes the clusters and clients t starts from now on secure.
func secure(t *testing.T) *secureSetup {
	t.Helper()
	dir := t.TempDir()
	ca := newTestCA(t, dir, "cluster")
	cert, key := ca.issue(t, dir, "node")
	gossipKey := filepath.Join(dir, "gossip.key")
	if err := os.WriteFile(gossipKey, []byte(base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secret := writeSecret(t, dir, "a-secret-of-the-secure-cluster-32-bytes-or-more")
	s := &secureSetup{
		nodeArgs: []string{"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-file", ca.file,
			"--gossip-key-file", gossipKey, "--auth-secret-file", secret},
		caFile:     ca.file,
		secretFile: secret,
		token:      cliToken(t, "--secret-file", secret, "--subject", "tests", "--superuser", "--expires", "1h"),
	}
	secured.Store(t, s)
	t.Cleanup(func() { secured.Delete(t) })
	return s
}

// cliEnv is the environment a CLI process of t needs to reach url: the
// URL, and for a secure cluster its CA and an operator's token.
func cliEnv(t testing.TB, url string) []string {
	env := []string{"FABRIQ_URL=" + url}
	if s := secureOf(t); s != nil {
		env = append(env, "FABRIQ_TLS_CA_FILE="+s.caFile, "FABRIQ_TOKEN="+s.token)
	}
	return env
}

// The subscription tests pass on a cluster with TLS on every port, gossip
// encrypted and authentication on.
func TestSecureClusterSubscriptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(*testing.T)
	}{{"exclusive", testClusterExclusive}, {"shared", testClusterShared}, {"failover", testClusterFailover}, {"key_shared", testClusterKeyShared}} {
		t.Run(tc.name, func(t *testing.T) {
			secure(t)
			tc.run(t)
		})
	}
}

// On a cluster with TLS on: a plaintext client is refused, and so is a
// peer on the Raft port without a certificate of the cluster's CA (none,
// or another CA's); a node with such a certificate cannot join. The HTTP
// port speaks HTTPS.
func TestSecureClusterRefusesStrangers(t *testing.T) {
	t.Parallel() // mostly waiting on processes: see TestMain
	s := secure(t)
	nodes := startCluster(t, 3)
	ctx := testContext(t, 2*time.Minute)
	c := newClient(t, clusterURL(nodes))
	if err := createStream(ctx, c, "persistent://public/default/tls", 1, 3); err != nil {
		t.Fatal(err)
	}

	// A plaintext client.
	plain, err := client.New(client.Options{URL: "fabriq://" + nodes[0].addr, Token: s.token, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.ListTenants(ctx); transport.CodeOf(err) != transport.CodeNotAllowed || !strings.Contains(err.Error(), "fabriq+tls://") {
		t.Fatalf("a plaintext client: %v; want refused, pointing at fabriq+tls://", err)
	}
	// A TLS client that does not trust the cluster's CA.
	other := newTestCA(t, t.TempDir(), "other")
	stranger, err := client.New(client.Options{URL: "fabriq+tls://" + nodes[0].addr, TLSCAFile: other.file, Token: s.token, ConnectTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if _, err := stranger.ListTenants(sctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client of another CA: %v", err)
	}

	// The Raft port: the header of the metadata group, sent after a TLS
	// handshake with no certificate, with another CA's, and in the clear.
	raftAddr := raftAddrOf(t, nodes[0])
	dir := t.TempDir()
	otherCert, otherKey := other.issue(t, dir, "intruder")
	intruder, err := tls.LoadX509KeyPair(otherCert, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	nodeCert, err := tls.LoadX509KeyPair(argOf(s.nodeArgs, "--tls-cert-file"), argOf(s.nodeArgs, "--tls-key-file"))
	if err != nil {
		t.Fatal(err)
	}
	if !raftPeerServed(ctx, t, raftAddr, []tls.Certificate{nodeCert}, false) {
		t.Fatal("the Raft port does not serve a peer with the cluster's certificate")
	}
	for _, tc := range []struct {
		what  string
		certs []tls.Certificate
		plain bool
	}{{"no certificate", nil, false}, {"another CA's certificate", []tls.Certificate{intruder}, false}, {"plain TCP", nil, true}} {
		if raftPeerServed(ctx, t, raftAddr, tc.certs, tc.plain) {
			t.Errorf("%s: the Raft port served a peer", tc.what)
		}
	}

	// A node with a certificate of another CA (and the right gossip key
	// and secret) never joins: the others refuse its Raft connections.
	badArgs := append([]string(nil), s.nodeArgs...)
	for i, a := range badArgs {
		switch a {
		case "--tls-cert-file":
			badArgs[i+1] = otherCert
		case "--tls-key-file":
			badArgs[i+1] = otherKey
		case "--tls-ca-file":
			badArgs[i+1] = other.file
		}
	}
	bad := launch(t, "n4", filepath.Join(t.TempDir(), "n4"), append(badArgs, "--join", nodes[0].gossip, "--bootstrap-expect", "3")...)
	defer bad.kill()
	eventually(ctx, t, "a cluster node refusing n4's Raft connections", func() bool {
		for _, n := range nodes {
			if strings.Contains(n.logs.String(), "refused a raft connection: TLS handshake failed") {
				return true
			}
		}
		return false
	})
	st, err := c.ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.ID == "n4" {
			t.Fatalf("n4 joined the cluster: %+v", st.Nodes)
		}
	}

	// HTTPS on the HTTP port, checked against the cluster's CA.
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(s.caFile)
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get("https://" + nodes[0].http + "/readyz")
	if err != nil {
		t.Fatalf("https /readyz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r readyz
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &r) != nil || !r.Ready {
		t.Fatalf("https /readyz answered %d %s", resp.StatusCode, body)
	}
	if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + nodes[0].http + "/readyz"); err == nil && resp.StatusCode == http.StatusOK {
		t.Fatal("plain HTTP answered 200")
	}
}

// raftAddrOf returns the Raft address a node was given.
func raftAddrOf(t *testing.T, n *clusterNode) string {
	t.Helper()
	a := argOf(n.args, "--raft-addr")
	if a == "" {
		t.Fatal("no --raft-addr")
	}
	return a
}

// argOf returns the value of flag in args, "" if absent.
func argOf(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// raftPeerServed calls a method no node has on a node's Raft port, as a
// peer calls another: it reports whether the node answered (that it has
// no such method), which it must not do for a stranger. With certs nil and
// plain, the call is in the clear.
func raftPeerServed(ctx context.Context, t *testing.T, addr string, certs []tls.Certificate, plain bool) bool {
	t.Helper()
	rc := cluster.NewRPCClient()
	defer rc.Close()
	if !plain {
		rc.SetTLS(&tls.Config{InsecureSkipVerify: true, Certificates: certs})
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := rc.Call(ctx, addr, "no-such-method", struct{}{}, nil)
	var re *cluster.RPCError
	return errors.As(err, &re)
}
