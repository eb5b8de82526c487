package transport

// Operators' requests on a subscription of one partition, with no
// consumer attached. The partition's leader answers (others NotLeader,
// with a hint); a client acts on a stream by asking each partition.

// ResetCursor moves a subscription's cursor: to Offset (held within the
// partition's start and end: 0 is the earliest message kept,
// math.MaxUint64 the end, which skips the whole backlog) or, with Time
// set, to the first message published at or after Time (Unix
// milliseconds). Every consumer of the subscription restarts from there,
// as after a consumer's Seek. Answered by Success, or SubscriptionNotFound.
type ResetCursor struct {
	RequestID    uint64 `msgpack:"r"`
	Partition    string `msgpack:"p"`
	Subscription string `msgpack:"s"`
	Offset       uint64 `msgpack:"o,omitempty"`
	Time         *int64 `msgpack:"t,omitempty"`
}

// DeleteSubscription deletes a subscription with its cursor; refused
// (NotAllowed) while consumers are attached, unless Force, which
// disconnects them. Answered by Success, or SubscriptionNotFound.
type DeleteSubscription struct {
	RequestID    uint64 `msgpack:"r"`
	Partition    string `msgpack:"p"`
	Subscription string `msgpack:"s"`
	Force        bool   `msgpack:"f,omitempty"`
}

func (*ResetCursor) Type() CommandType        { return TypeResetCursor }
func (*DeleteSubscription) Type() CommandType { return TypeDeleteSubscription }

// newSubscriptionCommand returns a new command of one of the types above.
func newSubscriptionCommand(t CommandType) Command {
	switch t {
	case TypeResetCursor:
		return new(ResetCursor)
	case TypeDeleteSubscription:
		return new(DeleteSubscription)
	}
	return nil
}
