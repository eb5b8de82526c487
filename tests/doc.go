// Package tests holds fabriq's tests across real processes: it builds
// fabriqd and fabriq, starts nodes as child processes on loopback ports
// they choose, kills and restarts them, and drives them through the Go
// client and the CLI exactly as users do.
package tests
