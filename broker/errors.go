package broker

import (
	"errors"
	"fmt"

	"github.com/fabriq-io/fabriq/subscription"
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
	msgConsumerNameBusy    = "A consumer named '%s' is already connected to the subscription"
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
func modeName(m transport.SubscriptionMode) string { return subscription.Mode(m).String() }

// keyPolicyName is a key_shared policy as users write it (SUB-2).
func keyPolicyName(m transport.KeySharedMode, outOfOrder bool) string {
	return keyPolicy(m, outOfOrder).String()
}

// keyPolicy maps a wire key_shared policy to the engine's.
func keyPolicy(m transport.KeySharedMode, outOfOrder bool) subscription.KeyPolicy {
	return subscription.KeyPolicy{Sticky: m == transport.Sticky, OutOfOrder: outOfOrder}
}
