package subscription

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every rule of sections 2 to 5 of RULES.md (failover, shared, key_shared,
// cursors) is cited by a test of this package, where the dispatch engine
// runs with a fake clock.
func TestRulesAreTested(t *testing.T) {
	doc, err := os.ReadFile("RULES.md")
	if err != nil {
		t.Fatal(err)
	}
	ids := regexp.MustCompile(`\*\*((?:FO|SH|KS|CUR)-\d+)\*\*`).FindAllStringSubmatch(string(doc), -1)
	if len(ids) < 30 {
		t.Fatalf("RULES.md lists %d rules of sections 2 to 5, want them all", len(ids))
	}
	tests, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var cited strings.Builder
	for _, f := range tests {
		if f == "rules_test.go" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cited.Write(b)
	}
	for _, id := range ids {
		if !regexp.MustCompile(`\b` + id[1] + `\b`).MatchString(cited.String()) {
			t.Errorf("no test of the subscription package cites %s", id[1])
		}
	}
}
