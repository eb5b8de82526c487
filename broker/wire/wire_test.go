package wire

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fabriq-io/fabriq/transport"
)

// A client is told the code of the transport error an error wraps, on a
// copy it may change (a request id), and Unknown for any other error.
func TestFrom(t *testing.T) {
	orig := Errorf(transport.CodeNotLeader, "node %s leads", "n2")
	got := From(fmt.Errorf("subscribe: %w", orig))
	if got.Code != transport.CodeNotLeader || got.Message != "node n2 leads" {
		t.Fatalf("a wrapped NotLeader became %v %q", got.Code, got.Message)
	}
	got.RequestID = 7
	if orig.RequestID != 0 {
		t.Fatal("From returned the wrapped error itself, not a copy")
	}
	if got := From(errors.New("boom")); got.Code != transport.CodeUnknown || got.Message != "boom" {
		t.Fatalf("a plain error became %v %q", got.Code, got.Message)
	}
}
