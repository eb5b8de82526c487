package auth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MinSecretBytes is the shortest HMAC secret accepted: 256 bits.
const MinSecretBytes = 32

// maxKeyFile bounds the size of a secret or key file read.
const maxKeyFile = 64 << 10

// ReadSecretFile reads an HMAC secret: the file's bytes without trailing
// white space (so that `openssl rand -base64 48 > FILE` makes one), at
// least MinSecretBytes of them.
func ReadSecretFile(path string) ([]byte, error) {
	b, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, " \t\r\n")
	if len(b) < MinSecretBytes {
		return nil, fmt.Errorf("auth: secret file %s holds %d bytes; a secret has at least %d (make one with: openssl rand -base64 48 > %s)", path, len(b), MinSecretBytes, path)
	}
	return b, nil
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	if !st.Mode().IsRegular() || st.Size() > maxKeyFile {
		return nil, fmt.Errorf("auth: %s is not a key file (a regular file of at most %d bytes)", path, maxKeyFile)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("auth: read %s: %w", path, err)
	}
	return b, nil
}

// Verifier checks tokens. It is safe for concurrent use.
type Verifier struct {
	key    any
	parser *jwt.Parser
}

// NewVerifier returns a Verifier of tokens signed with an HMAC secret
// (HS256, HS384 or HS512).
func NewVerifier(secret []byte) (*Verifier, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("auth: an HMAC secret of %d bytes; at least %d", len(secret), MinSecretBytes)
	}
	return newVerifier(bytes.Clone(secret), "HS256", "HS384", "HS512"), nil
}

// NewPublicKeyVerifier returns a Verifier of tokens signed with the
// private key of a PEM public key: RSA (RS256…, PS256…), ECDSA (the ES
// algorithm of its curve) or Ed25519 (EdDSA).
func NewPublicKeyVerifier(pemData []byte) (*Verifier, error) {
	key, err := parsePublicKey(pemData)
	if err != nil {
		return nil, err
	}
	switch k := key.(type) {
	case *rsa.PublicKey:
		return newVerifier(k, "RS256", "RS384", "RS512", "PS256", "PS384", "PS512"), nil
	case *ecdsa.PublicKey:
		m, err := ecdsaMethod(k.Curve)
		if err != nil {
			return nil, err
		}
		return newVerifier(k, m.Alg()), nil
	case ed25519.PublicKey:
		return newVerifier(k, "EdDSA"), nil
	}
	return nil, fmt.Errorf("auth: a public key of type %T; RSA, ECDSA or Ed25519 only", key)
}

// LoadVerifier reads the verifier's key: an HMAC secret file or a PEM
// public key file, exactly one of them.
func LoadVerifier(secretFile, publicKeyFile string) (*Verifier, error) {
	switch {
	case secretFile != "" && publicKeyFile != "":
		return nil, errors.New("auth: give a secret file or a public key file, not both")
	case secretFile != "":
		secret, err := ReadSecretFile(secretFile)
		if err != nil {
			return nil, err
		}
		return NewVerifier(secret)
	case publicKeyFile != "":
		b, err := readKeyFile(publicKeyFile)
		if err != nil {
			return nil, err
		}
		v, err := NewPublicKeyVerifier(b)
		if err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, publicKeyFile)
		}
		return v, nil
	}
	return nil, errors.New("auth: no secret file and no public key file")
}

func newVerifier(key any, methods ...string) *Verifier {
	return &Verifier{
		key:    key,
		parser: jwt.NewParser(jwt.WithValidMethods(methods), jwt.WithIssuedAt()),
	}
}

// Verify checks a token's signature, algorithm, times and claims, and
// returns its claims. Its errors say why in words fit for the client:
// expired, not yet valid, wrongly signed, malformed.
func (v *Verifier) Verify(token string) (*Claims, error) {
	if token == "" {
		return nil, errors.New("no token given")
	}
	var c Claims
	_, err := v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.key, nil })
	switch {
	case err == nil:
		return &c, nil
	case errors.Is(err, jwt.ErrTokenExpired):
		return nil, fmt.Errorf("the token of %q expired at %s", c.Subject, c.ExpiresAt.UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return nil, fmt.Errorf("the token of %q is not valid yet", c.Subject)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return nil, errors.New("the token's signature does not verify with this cluster's key")
	case errors.Is(err, jwt.ErrTokenMalformed):
		return nil, errors.New("the token is malformed")
	}
	return nil, fmt.Errorf("the token is refused: %w", err)
}

// Signer makes tokens. It is safe for concurrent use.
type Signer struct {
	method jwt.SigningMethod
	key    any
}

// NewSigner returns a Signer of HS256 tokens with an HMAC secret.
func NewSigner(secret []byte) (*Signer, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("auth: an HMAC secret of %d bytes; at least %d", len(secret), MinSecretBytes)
	}
	return &Signer{method: jwt.SigningMethodHS256, key: bytes.Clone(secret)}, nil
}

// NewPrivateKeySigner returns a Signer with a PEM private key: RS256 for
// RSA, the ES algorithm of an ECDSA key's curve, EdDSA for Ed25519.
func NewPrivateKeySigner(pemData []byte) (*Signer, error) {
	key, err := parsePrivateKey(pemData)
	if err != nil {
		return nil, err
	}
	switch k := key.(type) {
	case *rsa.PrivateKey:
		return &Signer{method: jwt.SigningMethodRS256, key: k}, nil
	case *ecdsa.PrivateKey:
		m, err := ecdsaMethod(k.Curve)
		if err != nil {
			return nil, err
		}
		return &Signer{method: m, key: k}, nil
	case ed25519.PrivateKey:
		return &Signer{method: jwt.SigningMethodEdDSA, key: k}, nil
	}
	return nil, fmt.Errorf("auth: a private key of type %T; RSA, ECDSA or Ed25519 only", key)
}

// LoadSigner reads the signer's key: an HMAC secret file or a PEM private
// key file, exactly one of them.
func LoadSigner(secretFile, privateKeyFile string) (*Signer, error) {
	switch {
	case secretFile != "" && privateKeyFile != "":
		return nil, errors.New("auth: give a secret file or a private key file, not both")
	case secretFile != "":
		secret, err := ReadSecretFile(secretFile)
		if err != nil {
			return nil, err
		}
		return NewSigner(secret)
	case privateKeyFile != "":
		b, err := readKeyFile(privateKeyFile)
		if err != nil {
			return nil, err
		}
		s, err := NewPrivateKeySigner(b)
		if err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, privateKeyFile)
		}
		return s, nil
	}
	return nil, errors.New("auth: no secret file and no private key file")
}

// Sign makes a token of c, valid from now until ttl from now (ttl 0: no
// expiry). It checks the claims first, as a Verifier would.
func (s *Signer) Sign(c Claims, ttl time.Duration) (string, error) {
	now := time.Now()
	c.IssuedAt = jwt.NewNumericDate(now)
	c.ExpiresAt = nil
	if ttl < 0 {
		return "", errors.New("auth: a negative lifetime")
	}
	if ttl > 0 {
		c.ExpiresAt = jwt.NewNumericDate(now.Add(ttl))
	}
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	return jwt.NewWithClaims(s.method, &c).SignedString(s.key)
}

func ecdsaMethod(curve elliptic.Curve) (*jwt.SigningMethodECDSA, error) {
	switch curve {
	case elliptic.P256():
		return jwt.SigningMethodES256, nil
	case elliptic.P384():
		return jwt.SigningMethodES384, nil
	case elliptic.P521():
		return jwt.SigningMethodES512, nil
	}
	return nil, fmt.Errorf("auth: an ECDSA key on curve %s; P-256, P-384 or P-521 only", curve.Params().Name)
}

func pemBlock(pemData []byte, what string) (*pem.Block, error) {
	block, _ := pem.Decode(pemData)
	if block == nil {
		return nil, fmt.Errorf("auth: no PEM block in the %s", what)
	}
	return block, nil
}

func parsePublicKey(pemData []byte) (crypto.PublicKey, error) {
	block, err := pemBlock(pemData, "public key")
	if err != nil {
		return nil, err
	}
	switch block.Type {
	case "PUBLIC KEY":
		return x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		return x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		return cert.PublicKey, nil
	}
	return nil, fmt.Errorf("auth: a PEM block of type %q; a public key is PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", block.Type)
}

func parsePrivateKey(pemData []byte) (crypto.PrivateKey, error) {
	block, err := pemBlock(pemData, "private key")
	if err != nil {
		return nil, err
	}
	switch block.Type {
	case "PRIVATE KEY":
		return x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	}
	return nil, fmt.Errorf("auth: a PEM block of type %q; a private key is PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY", block.Type)
}
