package partition

import (
	"github.com/fabriq-io/fabriq/subscription"
	"github.com/fabriq-io/fabriq/transport"
)

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
