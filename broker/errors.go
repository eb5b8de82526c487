package broker

import (
	"errors"
	"fmt"

	"github.com/fabriq-io/fabriq/transport"
)

// Error texts that are part of the contract (SEMANTICS.md); keep them here,
// in one table.
const (
	msgExclusiveBusy       = "Exclusive consumer is already connected"
	msgSubscriptionType    = "Subscription is of different type: active '%s', requested '%s'"
	msgCumulativeShared    = "Cumulative ack is not allowed on a shared subscription"
	msgProducerBusy        = "Producer with name '%s' is already connected to the stream"
	msgUnsubscribeNotAlone = "Unsubscribe is allowed only for the sole attached consumer; use force"
)

// wireError returns a transport error with a code and a message.
func wireError(code transport.ErrorCode, format string, args ...any) *transport.Error {
	return &transport.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// toWire maps any error to a transport error for a client.
func toWire(err error) *transport.Error {
	var te *transport.Error
	if errors.As(err, &te) {
		c := *te
		return &c
	}
	return &transport.Error{Code: transport.CodeUnknown, Message: err.Error()}
}

// modeName is a subscription mode as users write it.
func modeName(m transport.SubscriptionMode) string {
	switch m {
	case transport.Exclusive:
		return "exclusive"
	case transport.Shared:
		return "shared"
	case transport.Failover:
		return "failover"
	case transport.KeyShared:
		return "key_shared"
	}
	return fmt.Sprintf("mode(%d)", m)
}
