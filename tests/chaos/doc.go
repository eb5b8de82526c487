// Package chaos is fabriq's Jepsen-style suite: it runs real fabriqd
// processes, injects faults on a seeded random plan while clients produce
// and consume, records every client operation (invoke, then ok, fail or
// info for an unknown outcome) with monotonic times, and checks the
// history once the cluster is healed and drained.
//
// The checkers are plain functions over a History and have their own
// tests on hand-made histories that must fail. The scenarios need the
// fabriqd binary and take minutes: they are built with the chaos tag and
// run by `make chaos` (about 20 minutes) and `make chaos-short` (2).
package chaos
