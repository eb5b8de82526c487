// Package wan puts fabriqd nodes in regions that are really far apart,
// on one machine. Each node runs in a network namespace of its own
// (a host) whose only way out is a TUN device; this process reads the
// packets every host sends and writes them to the host they are
// addressed to, holding those that cross regions for a one-way delay.
// The kernel here has no sch_netem, so the delay is applied in user
// space, to every packet alike: Raft, gossip (UDP and TCP) and client
// traffic. A client joins a region by dialling from one of its hosts
// (Dialer).
//
// The tests here check the delays themselves; the latency figures
// between regions are benchmarks (`make bench-wan`). It needs root,
// iproute2 and /dev/net/tun, as the CI has.
package wan
