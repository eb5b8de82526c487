// Package storage owns a partition's message log on disk.
//
// A Log is an append-only, segmented, checksummed log of message batches in
// which every message has its own offset. It is what a partition's Raft state
// machine appends committed batches to and what consumers read from. The
// package knows nothing about Raft, the network, streams or subscriptions:
// the caller hands it a Raft index with every batch, and the log records that
// index atomically with the data so that a replay after a restart can skip
// what is already there.
//
// Main types:
//
//   - Log: Open, Append, Read, OffsetForTime, Retain, TrimBefore, Segments, Sync, Close.
//   - Message: one message with its key, ordering key, properties, times,
//     producer name, sequence id and payload.
//   - Snapshot: a point-in-time view of a Log, made of hard links (its cost
//     does not grow with the log's size), that can be streamed with WriteTo
//     and installed on an empty replica with Log.Restore.
//
// Durability: Append does not fsync, because the broker's Raft log is its
// write-ahead log. Segments are synced when they are sealed, when a Snapshot
// is taken, on Sync and on Close; Sync also records how much of the active
// segment is durable (the sync mark). A caller without another write-ahead
// log calls Sync before it relies on an append.
//
// Crash safety: every batch carries a CRC-32C. On Open, a bad batch past the
// sync mark of the last segment is a torn tail, written but never synced, and
// the segment is cut back to the last whole batch before it; the caller
// replays those entries from its own log (LastRaftIndex says from where). A
// bad batch anywhere else was durable once: it is reported as a
// *CorruptError naming the file, the byte position and the offset, never
// returned as data.
//
// DESIGN.md beside this file describes the disk format and the decisions
// behind it.
package storage
