// Package checker checks what clients of a fabriq cluster recorded: which
// consumer received which message of which key, and when it let go of it.
// The checks are the user's promises: per key, delivery follows the send
// order with nothing skipped; a key is never unacked on two consumers at
// once (KS-7); each key stays with one consumer.
//
// The integration tests and the chaos suite feed it from live clients;
// its own tests feed it hand-made histories that must fail.
package checker
