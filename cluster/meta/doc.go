// Package meta is fabriq's control plane: the metadata Raft group and what
// is decided from it. It owns
//
//   - the metadata state machine (Catalog): the nodes of the cluster, the
//     tenants and their fabrics (regions, defaults of their streams), and
//     the streams, with the placement of every partition's replicas and
//     each replica's member id in its partition's Raft group (MemberID);
//   - its entries, structs of their own in a type space of their own
//     (RegisterNode, CreateStream, DeleteStream, ReplaceReplica,
//     RenewReplica, SetRetention, CreateTenant, DeleteTenant,
//     CreateFabric, DeleteFabric, SetFabricRegions), applied through a
//     dispatch table;
//   - the decisions, as pure functions: where a new stream's replicas go
//     (Place), which node leads too much (BalanceLeaders), which replicas
//     of dead nodes move where (DeadNodes, FindRepairs, Target, Settled),
//     which nodes join the metadata group (Registrations, MetaChanges),
//     what a node runs as which member (Assignments, PlanNode), how a
//     partition's leader changes its group (MemberChanges);
//   - the Service that carries them out on a node: bootstrap, the
//     metadata leader's loop, catching up after a restart, leader
//     balancing, tenant, fabric and stream administration (a stream's
//     fabric must exist; streams are created on first use), replica
//     renewal, and the node-to-node calls these need, on the Raft port
//     (cluster.RPCServer).
//
// It does not run partitions. The broker does, and implements Host for
// what only it can do with its copies: report their member, leadership
// and committed configuration (View), tell who leads a partition, hand a
// leadership over, and reconcile when the catalog changes. The broker
// reads the catalog for the rest.
//
// Entries are one type byte and a msgpack body. A type this version does
// not know stops the node unless it carries IgnoreUnknownTypeFlag. The
// bytes match what earlier versions wrote (testdata holds them; the golden
// tests fail if a tag or a type changes).
//
// DESIGN.md beside this file says why it is built this way.
package meta
