// Package cluster runs the Raft groups of a fabriq node.
//
// Every partition is its own Raft group, and a node hosts many of them over
// one TCP port. This package owns that plumbing: the listener shared by all
// groups, one hashicorp/raft instance per group with its stores, and a
// snapshot store in which a snapshot of a large partition log costs a few
// file-system operations instead of a copy. It also owns gossip membership
// (Membership) and the leader routing table that travels with it (Routes),
// and the node-to-node calls on the Raft port (RPCServer, RPCClient). The
// metadata group's state machine, placement and repair are the control
// plane's, in the subpackage cluster/meta.
//
// The package does not know what a group replicates. The caller (the
// broker's partition state machine) supplies a raft.FSM; cluster delivers
// committed entries to it, asks it for snapshots, and restores it. Raft
// server ids are stable node ids, never addresses.
//
// Main types:
//
//   - Mux: splits the node's Raft listener between groups. Each connection
//     opens with a header naming its group ("FQRG", a version byte, the
//     group id's length and the id) and, from nodes that speak
//     ProtocolMembers, the member of the group it is for; a bad header, an
//     unknown group or another member of the group than this node runs
//     closes that connection and nothing else. SetProtocols tells it what
//     each peer speaks (Membership.ProtocolOf). It also carries every
//     group's heartbeats to each node that speaks ProtocolHeartbeats
//     together, one frame per pair of nodes and heartbeat window, as the
//     reserved group HeartbeatGroup (HeartbeatStats counts them). A group
//     idle for two seconds goes quiet: its leader answers most of its own
//     heartbeats, its followers watch the leader's node instead
//     (cluster/DESIGN.md, "Quiet groups"), and when its process is gone
//     (its connection ended and its port refuses) each group's successor
//     stands at once. The same rounds say which
//     followers hold entries they have not applied (their leader's next
//     append goes; idle ones otherwise every 30 s), and which groups a
//     node opened with no leader: each group's first member stands as soon
//     as another voter has it open ("First elections"). A quiet group
//     whose followers have every entry can sleep: each member closes,
//     leaving a mark, and the node offers its owner to wake it when
//     another node asks anything of it (SetAsleep, Rouse; "Sleeping
//     groups").
//   - Acceptor: an accept loop's listener that retries failed accepts (out
//     of descriptors) with a backoff and logs once per burst of failures;
//     the Mux and the broker's client port both accept through one.
//   - Layer: one group's share of a Mux, the raft.StreamLayer its
//     NetworkTransport accepts and dials through. The group's transport
//     dials each request to the member Raft names (MemberAddress), so a
//     vote asked of a member is never answered by another at its address.
//   - RPCServer, RPCClient: node-to-node calls on the Raft port, as the
//     reserved group RPCGroup: length-prefixed msgpack requests and
//     answers, a deadline on every call, pooled connections; RPCError is
//     an answered failure.
//   - Group: one Raft group on this node. OpenGroup, Bootstrap, Apply,
//     Barrier, leadership (IsLeader, Leader, Term, WatchLeader,
//     WaitForLeader), membership (Servers, the latest configuration;
//     ConfigStatus, the committed one; AddVoter, AddNonvoter,
//     RemoveServer, TransferLeadership), Snapshot, Lag, Close, and Sleep,
//     Idle, Rouse (Asleep tells a directory's member asleep).
//   - SnapshotStore and DirSink: a raft.SnapshotStore whose sinks can adopt
//     a directory of hard links (a storage.Snapshot) by renaming it, and
//     that expands it back into bytes through an ExpandFunc when the
//     snapshot is read.
//
// Lifecycle of a node: create the Mux on the Raft listener and Start it;
// open each Group (OpenGroup registers its Layer on the Mux); Bootstrap a
// new group from every initial member with the same server list; on
// shutdown close every Group, then the Mux. Group.Close stops Raft, then
// the transport and every connection of the group, then the store, and is
// idempotent.
//
// Waiting: every call that waits for Raft takes a context and never waits
// past its deadline, or past GroupConfig.OpTimeout when it has none. All
// of them wait on Raft futures through one helper, so an Apply cannot hang
// when a majority is gone. A deadline gives ErrTimeout; the outcome of an
// Apply that timed out, or that failed with ErrLeadershipLost, is unknown.
//
// Damage on disk: every Raft entry a group stores carries a CRC-32C, and
// every read checks it; snapshots' metadata and state carry theirs. A
// group whose Raft log holds a damaged entry it would replay fails to open
// with ErrDamaged; damage a running group finds (an entry or a snapshot
// read for a follower) is never sent, and is reported once to
// GroupConfig.OnDamage, so the caller renews that copy.
//
// Errors are the sentinels of errors.go, tested with errors.Is. An
// operation that needs the leader fails elsewhere with a *NotLeaderError
// naming the leader this node knows of, so the caller can redirect.
//
// Leadership changes come through WatchLeader: a channel holding the latest
// Leadership, fed from a Raft observer that never blocks Raft; or, with no
// goroutine to wait on it, as calls of a function (WatchLeaderFunc).
//
// Logs go to the *slog.Logger of the configuration; hashicorp/raft's hclog
// output is bridged into it (Trace at LevelTrace).
//
// Membership and routing: a Membership is the node's view of the
// cluster, kept by gossip (hashicorp/memberlist) on the gossip port. It
// knows every member's NodeMeta (region, client, Raft and HTTP addresses,
// version) and state (alive, left, dead), and tells watchers of joins,
// updates, graceful leaves and failures. The same gossip carries the
// leader routing table, Routes: the partition's leader announces itself
// (Announce), every node can Lookup any partition, and a deleted
// partition is forgotten with a tombstone (Forget). Newer routes win by
// (epoch, term), whatever order they arrive in.
//
//   - MembershipConfig, DefaultMembershipConfig: the gossip knobs;
//     DetectionTime says how long the cluster takes to declare a failed
//     node dead (4.3s with the defaults, up to 10 nodes).
//   - Membership: NewMembership, Start, Addr, Members, LocalMember,
//     ProtocolOf, Watch, UpdateMeta, Leave, Close, Routes.
//   - NodeMeta, Member, MemberState, MemberEvent, MemberWatch.
//   - Routes (Announce, Forget, Lookup, Snapshot, Watch), Route,
//     RouteEvent, RouteWatch.
//
// Lifecycle: NewMembership starts nothing; Start opens the port and joins
// the Join addresses in the background; Leave says goodbye (the others see
// the node Left, not Dead); Close stops gossip and every watch, and is
// idempotent. memberlist's callbacks never block and never call back into
// memberlist: they queue what they get for the Membership's goroutine.
// Watch channels never make gossip wait: a slow reader receives each
// node's or partition's latest state instead of every step. memberlist's
// log lines are bridged into the configured *slog.Logger.
//
// DESIGN.md beside this file describes the wire header, the snapshot
// store's disk layout and the decisions behind them.
package cluster
