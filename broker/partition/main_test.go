package partition

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts has stopped when the tests end:
// dispatchers and their pushes are closed by their owners.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
