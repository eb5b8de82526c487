//go:build !race

package fsm

// raceEnabled is set when the tests run under the race detector, whose
// instrumentation allocates on top of the code's own.
const raceEnabled = false
