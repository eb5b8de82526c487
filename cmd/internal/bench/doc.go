// Package bench runs the workloads of `fabriq bench` against a cluster
// through the public client: producers and consumers on one stream, in
// the spirit of the OpenMessaging Benchmark, measuring throughput and
// publish and end-to-end latency in HDR histograms (Run); and leader
// kills under a synchronous producer and a key_shared consumer,
// measuring how long until sends are acknowledged and messages delivered
// again, and checking that nothing acknowledged went missing (Failover).
package bench
