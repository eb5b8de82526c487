// Package pulsarwire reads and writes Apache Pulsar's binary protocol:
// frames (a command, and for sends and deliveries a checksummed message
// metadata and payload), the batches inside a payload and their
// compression. Package pb holds the protocol's messages, generated from
// pb/pulsar.proto.
//
// A frame is [total size u32][command size u32][BaseCommand], and a frame
// that carries a message goes on with [0x0e01][CRC32C u32][metadata size
// u32][MessageMetadata][payload], the checksum over everything after it.
// Sizes are checked before anything is allocated for them, against the
// limit the reader is given; a frame that breaks the format is an error
// of that frame (ErrMalformed, ErrChecksum, *FrameSizeError), and the
// connection that sent it is closed, no other.
//
// Message ids. Pulsar names a message (ledger, entry, partition, batch
// index); fabriq names it by its partition and offset. fabriq writes
// ledger 1 (LedgerID), entry the offset of the first message of the batch
// it was sent in (the send receipt's) or its own offset (a delivery, one
// message a frame, batch index -1), and reads back offset = entry +
// max(batch index, 0). Offsets are replicated, so an id means the same
// message on every replica and after any leader change.
package pulsarwire
