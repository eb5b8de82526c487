package pulsar

import "google.golang.org/protobuf/encoding/protowire"

// requestIDIn reads, from a BaseCommand's unknown bytes, the request id of
// its body of field number typ: field 1, a varint, in every request
// pulsar.proto leaves out (schemas, consumer stats, transactions, topic
// list watches).
func requestIDIn(raw []byte, typ int32) (uint64, bool) {
	for len(raw) > 0 {
		num, wt, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return 0, false
		}
		raw = raw[n:]
		if num == protowire.Number(typ) && wt == protowire.BytesType {
			body, m := protowire.ConsumeBytes(raw)
			if m < 0 {
				return 0, false
			}
			return firstVarint(body)
		}
		m := protowire.ConsumeFieldValue(num, wt, raw)
		if m < 0 {
			return 0, false
		}
		raw = raw[m:]
	}
	return 0, false
}

// firstVarint returns field 1 of a message when it is a varint.
func firstVarint(b []byte) (uint64, bool) {
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		if num == 1 && wt == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			return v, m >= 0
		}
		m := protowire.ConsumeFieldValue(num, wt, b)
		if m < 0 {
			return 0, false
		}
		b = b[m:]
	}
	return 0, false
}
