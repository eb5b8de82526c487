package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabriq-io/fabriq/auth"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCommand(nil, &out, &errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// A token made by the CLI verifies with the secret and grants what its
// flags said; mistakes are refused with a message naming the flag.
func TestTokenCreate(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("0123456789abcdef0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := auth.LoadVerifier(secret, "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "token", "create", "--secret-file", secret, "--subject", "app", "--tenant", "acme", "--fabric", "eu", "--actions", "consume")
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("the CLI's token: %v", err)
	}
	if c.Subject != "app" || !c.Allows(auth.Consume, "acme", "eu") || c.Allows(auth.Produce, "acme", "eu") ||
		c.Allows(auth.Consume, "acme", "us") || c.ExpiresAt == nil {
		t.Fatalf("claims %+v", c)
	}
	out, err = runCLI(t, "token", "create", "--secret-file", secret, "--subject", "ops", "--superuser", "--expires", "0")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := v.Verify(strings.TrimSpace(out)); err != nil || !c.Superuser || c.ExpiresAt != nil {
		t.Fatalf("an operator's token for ever: %+v, %v", c, err)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--subject", "x", "--tenant", "t"}, "--secret-file"},
		{[]string{"--secret-file", secret, "--tenant", "t"}, "--subject"},
		{[]string{"--secret-file", secret, "--subject", "x"}, "--tenant"},
		{[]string{"--secret-file", secret, "--subject", "x", "--tenant", "t", "--actions", "delete"}, "--actions"},
		{[]string{"--secret-file", secret, "--subject", "x", "--superuser", "--tenant", "t"}, "--superuser"},
		{[]string{"--secret-file", secret, "--subject", "x", "--tenant", "../t"}, "invalid"},
		{[]string{"--secret-file", secret, "--subject", "x", "--tenant", "t", "--expires", "-1h"}, "--expires"},
	} {
		_, err := runCLI(t, append([]string{"token", "create"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("token create %v: %v, want an error saying %q", tc.args, err, tc.says)
		}
	}
	// --help does not print a token taken from the environment.
	t.Setenv("FABRIQ_TOKEN", "secret-token-value")
	help, err := runCLI(t, "--help")
	if err != nil || strings.Contains(help, "secret-token-value") || !strings.Contains(help, "FABRIQ_TOKEN") {
		t.Fatalf("help: %v\n%s", err, help)
	}
}
