package broker

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// entryType is the first byte of every metadata Raft entry (catalog.go);
// the rest is the msgpack body of the matching entry struct. Partition
// entries are package fsm's, in a type space of their own.
type entryType uint8

// encodeEntry returns the Raft bytes of a metadata entry.
func encodeEntry(t entryType, body any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(byte(t))
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(body); err != nil {
		return nil, fmt.Errorf("broker: encode entry: %w", err)
	}
	return buf.Bytes(), nil
}
