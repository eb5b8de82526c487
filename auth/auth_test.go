package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var secret = []byte("0123456789abcdef0123456789abcdef-test-secret")

func tenantA() Claims {
	return Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: "app-a"},
		Grants: []Grant{
			{Tenant: "a", Fabric: "orders", Actions: []Action{Produce}},
			{Tenant: "a", Fabric: "events", Actions: []Action{Consume}},
			{Tenant: "ops", Actions: []Action{Admin}},
		},
	}
}

func TestAllows(t *testing.T) {
	c := tenantA()
	for _, tc := range []struct {
		a              Action
		tenant, fabric string
		want           bool
	}{
		{Produce, "a", "orders", true},
		{Consume, "a", "orders", false},
		{Consume, "a", "events", true},
		{Produce, "a", "events", false},
		{Admin, "a", "orders", false},
		{Produce, "b", "orders", false}, // same fabric name, other tenant
		{Consume, "b", "events", false},
		{Produce, "a", "", false}, // the tenant as a whole: no grant covers it
		{Produce, "ops", "any", true},
		{Consume, "ops", "any", true},
		{Admin, "ops", "", true},
		{Admin, "opsx", "", false},
	} {
		if got := c.Allows(tc.a, tc.tenant, tc.fabric); got != tc.want {
			t.Errorf("Allows(%s, %q, %q) = %v, want %v", tc.a, tc.tenant, tc.fabric, got, tc.want)
		}
	}
	if !c.Reaches("a", "") || !c.Reaches("a", "orders") || c.Reaches("a", "other") || c.Reaches("b", "") {
		t.Error("Reaches: a and a/orders only (and ops)")
	}
	su := Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: "root"}, Superuser: true}
	if !su.Allows(Admin, "anything", "") || !su.Reaches("x", "") {
		t.Error("a superuser may do everything")
	}
	var none *Claims
	if none.Allows(Consume, "a", "events") || none.Reaches("a", "") {
		t.Error("no claims allow nothing")
	}
}

func TestVerifyHMAC(t *testing.T) {
	s, err := NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.Sign(tenantA(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(tok)
	if err != nil {
		t.Fatalf("a good token: %v", err)
	}
	if c.Subject != "app-a" || !c.Allows(Produce, "a", "orders") || c.Allows(Produce, "b", "orders") {
		t.Fatalf("claims read back: %+v", c)
	}

	other, _ := NewSigner([]byte("another-secret-another-secret-another-secret"))
	wrong, _ := other.Sign(tenantA(), time.Hour)
	refused(t, v, wrong, "signature")

	expired := tenantA()
	expired.ExpiresAt = jwt.NewNumericDate(time.Now().Add(-time.Minute))
	refused(t, v, hs256(t, expired), "expired")

	future := tenantA()
	future.NotBefore = jwt.NewNumericDate(time.Now().Add(time.Hour))
	refused(t, v, hs256(t, future), "not valid yet")

	anon := tenantA()
	anon.Subject = ""
	refused(t, v, hs256(t, anon), "no subject")

	empty := tenantA()
	empty.Grants = nil
	refused(t, v, hs256(t, empty), "grants nothing")

	bad := tenantA()
	bad.Grants = []Grant{{Tenant: "a", Actions: []Action{"delete-everything"}}}
	refused(t, v, hs256(t, bad), "unknown action")

	refused(t, v, "", "no token")
	refused(t, v, "not.a.token", "malformed")
	// Tampered claims: the payload of a superuser over tenantA's signature.
	parts := strings.Split(tok, ".")
	body, _ := json.Marshal(map[string]any{"sub": "app-a", "superuser": true})
	parts[1] = base64.RawURLEncoding.EncodeToString(body)
	refused(t, v, strings.Join(parts, "."), "signature")
	// alg none is never accepted.
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, &Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: "x"}, Superuser: true,
	}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	refused(t, v, none, "")
}

func hs256(t *testing.T, c Claims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, &c).SignedString(secret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func refused(t *testing.T, v *Verifier, tok, says string) {
	t.Helper()
	c, err := v.Verify(tok)
	if err == nil {
		t.Fatalf("token accepted (%+v); want refused saying %q", c, says)
	}
	if !strings.Contains(err.Error(), says) {
		t.Fatalf("refused with %q; want it to say %q", err, says)
	}
}

func TestPublicKeys(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		key  any
		pub  any
	}{{"rsa", rsaKey, &rsaKey.PublicKey}, {"ecdsa", ecKey, &ecKey.PublicKey}, {"ed25519", edKey, edKey.Public()}} {
		t.Run(tc.name, func(t *testing.T) {
			priv, err := x509.MarshalPKCS8PrivateKey(tc.key)
			if err != nil {
				t.Fatal(err)
			}
			pub, err := x509.MarshalPKIXPublicKey(tc.pub)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			privFile, pubFile := filepath.Join(dir, "key.pem"), filepath.Join(dir, "pub.pem")
			writePEM(t, privFile, "PRIVATE KEY", priv)
			writePEM(t, pubFile, "PUBLIC KEY", pub)
			s, err := LoadSigner("", privFile)
			if err != nil {
				t.Fatal(err)
			}
			v, err := LoadVerifier("", pubFile)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := s.Sign(tenantA(), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.Verify(tok); err != nil {
				t.Fatalf("a token of the key pair: %v", err)
			}
			// Algorithm confusion: an HMAC token keyed with the public
			// key's bytes must not pass as signed by the private key.
			forged, err := jwt.NewWithClaims(jwt.SigningMethodHS256, &Claims{
				RegisteredClaims: jwt.RegisteredClaims{Subject: "x"}, Superuser: true,
			}).SignedString(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
			if err != nil {
				t.Fatal(err)
			}
			refused(t, v, forged, "")
			hv, _ := NewVerifier(secret)
			refused(t, hv, tok, "")
		})
	}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("too-short\n"), 0o600)
	if _, err := LoadVerifier(short, ""); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("a short secret: %v", err)
	}
	good := filepath.Join(dir, "secret")
	os.WriteFile(good, append(secret, '\n'), 0o600)
	v, err := LoadVerifier(good, "")
	if err != nil {
		t.Fatal(err)
	}
	// The trailing newline is not part of the secret.
	s, _ := NewSigner(secret)
	tok, _ := s.Sign(tenantA(), time.Minute)
	if _, err := v.Verify(tok); err != nil {
		t.Fatalf("secret file with a newline: %v", err)
	}
	if _, err := LoadVerifier(good, good); err == nil {
		t.Fatal("both a secret and a public key accepted")
	}
	if _, err := LoadVerifier("", good); err == nil || !strings.Contains(err.Error(), "PEM") {
		t.Fatalf("a secret given as a public key: %v", err)
	}
	if _, err := LoadVerifier(dir, ""); err == nil {
		t.Fatal("a directory read as a secret")
	}
	if _, err := LoadVerifier(filepath.Join(dir, "missing"), ""); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a missing file: %v", err)
	}
}

func TestParseActions(t *testing.T) {
	got, err := ParseActions("produce, consume,produce")
	if err != nil || len(got) != 2 || got[0] != Produce || got[1] != Consume {
		t.Fatalf("ParseActions = %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "produce,delete"} {
		if _, err := ParseActions(bad); err == nil {
			t.Errorf("ParseActions(%q) accepted", bad)
		}
	}
}
