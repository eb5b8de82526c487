package session

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts has stopped when the tests end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
