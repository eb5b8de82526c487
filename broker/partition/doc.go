// Package partition runs one stream partition on a node: the driver that
// ties the partition's log (storage), its replicated state machine
// (broker/fsm) under its Raft group (cluster), and the subscription
// engine (subscription). Client sessions drive it through a
// protocol-neutral API; the node opens, wires and closes it.
//
// # What it owns
//
// The write path: sends sized, checked against the backlog quota and the
// node's free-space reserve, grouped into one Raft entry by a single
// proposer, committed in order with up to 64 entries in flight, and
// answered with their offsets; producer names claimed per partition
// (MSG-4) and a producer's last stored sequence id learnt through the
// write path (OpenProducer). The ack path: acks and redelivery counts
// gathered into one entry every few milliseconds (CUR-2, SH-7). The
// consumer sets: joins checked, then committed through Raft (SUB-7);
// leaves naming the member's generation; a silent exclusive holder probed
// before it is refused to a newcomer (EX-2); the leader's sweep of
// members away past the reconnect grace. The dispatch driver: one
// dispatcher per subscription with consumers, on the leader, feeding
// subscription.Dispatcher and pushing the frames it decides. The
// retention loop, which applies the state machine's decision
// (fsm.DecideRetention). The mapping between transport's types and the
// state machine's, in one file (commands.go).
//
// # What it does not do
//
// It opens and closes nothing it runs on: the node opens the log, the
// state machine and the Raft group, hands them over in Config, and closes
// them (after StopAccepting, then Wait). It decides no dispatch (the
// subscription engine does) and applies no entry (the state machine
// does). It speaks no wire protocol: broker/session, fabriq's front end,
// reads frames and calls it.
//
// # API
//
// New(Config) returns a Partition; Start follows its group's leadership,
// and its loops start with their work (an idle partition holds no
// goroutine). A session claims a producer name (ClaimProducer), opens it
// (OpenProducer), sends (Send) and lets it go (ReleaseProducer).
// Subscribe returns the Consumer a session drives: Flow, Ack, Redeliver,
// Seek and SeekTime, Unsubscribe, Detach and Close. Describe fills in what the partition
// knows of itself; Attached says whether anything is attached.
//
// The package declares what it needs of its neighbours: Group (its Raft
// group, a cluster.Group), Reserve (the node's free-space reserve),
// Outbox (the session of a consumer: frames, role events, probes) and
// Holder (the session of a producer, told when it is dropped).
//
// The seam for a second front end: requests and frames are still
// transport's types (transport.MessageData, transport.Message pushed to
// an Outbox, transport.SubscriptionMode and its kin), and errors are
// *transport.Error with the contract's codes and texts (broker/wire). A
// Pulsar front end will want them neutral; until then it maps them.
//
// The package sits above broker/fsm, broker/wire, storage, subscription,
// cluster, geofabric and transport, and below broker/session and broker;
// it never imports either.
package partition
