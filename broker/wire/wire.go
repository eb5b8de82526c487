// Package wire holds the errors a fabriq node answers its clients with:
// transport errors with stable codes, and the error texts that are part
// of the contract (SEMANTICS.md), in one table. The partition driver
// (broker/partition), the client protocol's front end (broker/session)
// and the node (broker) all answer with them; the package imports nothing
// of theirs, so each can import it.
//
// The errors are transport's: the partition's API speaks fabriq's wire
// codes for now. A second front end (Pulsar's protocol) maps them to its
// own.
package wire

import (
	"errors"
	"fmt"

	"github.com/fabriq-io/fabriq/transport"
)

// Error texts that are part of the contract (SEMANTICS.md); keep them
// here, in one table.
const (
	ExclusiveBusy       = "Exclusive consumer is already connected"
	SubscriptionType    = "Subscription is of different type: active '%s', requested '%s'"
	CumulativeShared    = "Cumulative ack is not allowed on a shared subscription"
	ProducerBusy        = "Producer with name '%s' is already connected to the stream"
	UnsubscribeNotAlone = "Unsubscribe is allowed only for the sole attached consumer; use force"
	ConsumerNameBusy    = "A consumer named '%s' is already connected to the subscription"
)

// Errorf returns a transport error with a code and a message.
func Errorf(code transport.ErrorCode, format string, args ...any) *transport.Error {
	return &transport.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// From maps any error to a transport error for a client: a copy of the
// transport error it wraps, or Unknown with its text.
func From(err error) *transport.Error {
	var te *transport.Error
	if errors.As(err, &te) {
		c := *te
		return &c
	}
	return &transport.Error{Code: transport.CodeUnknown, Message: err.Error()}
}
