package transport

import "fmt"

// ErrorCode is a stable, named error code carried by Error and SendError.
// Values are part of the protocol: never renumber, only append.
type ErrorCode uint16

// Error codes.
const (
	CodeUnknown              ErrorCode = iota + 1 // an unexpected failure
	CodeProtocol                                  // a malformed or unexpected frame
	CodeVersionMismatch                           // Connect named another protocol version
	CodeNotLeader                                 // this node does not lead the partition; see LeaderHint
	CodeStreamNotFound                            // no such stream or partition
	CodeStreamExists                              // CreateStream of a stream that exists
	CodeInvalidName                               // a malformed stream, subscription or producer name
	CodeInvalidArgument                           // a request field out of range
	CodeProducerBusy                              // a producer with that name is attached
	CodeConsumerBusy                              // an exclusive consumer is attached
	CodeSubscriptionBusy                          // the subscription is of another mode or policy
	CodeSubscriptionNotFound                      // no such subscription
	CodeNotAllowed                                // the operation is not allowed in this state or mode
	CodeTooLarge                                  // a message or frame above the limit
	CodeTimeout                                   // the operation did not complete in time
	CodeConsumerAssignError                       // a key_shared range conflict
	CodeServiceNotReady                           // the node cannot serve yet (no leader, starting, stopping)
	CodeProducerNotFound                          // no such producer on this connection
	CodeConsumerNotFound                          // no such consumer on this connection
	CodeClosed                                    // the producer, consumer or connection is closed
	// CodeOutOfOrderSequence refuses a Send with a sequence id at or below
	// the producer's last stored one that the broker cannot prove stored:
	// never stored (an earlier send failed and a later one succeeded), or
	// older than the sends it remembers for deduplication. Nothing of the
	// Send is stored or acknowledged; resending the same ids is refused
	// again.
	CodeOutOfOrderSequence
	CodeLimitExceeded        // a node's limit (connections, producers, consumers, subscriptions) is reached
	CodeDiskFull             // the partition leader's disk is below its free-space reserve; retry later
	CodeBacklogQuotaExceeded // a send refused: a subscription's backlog is over the stream's quota
	CodeTenantNotFound       // no such tenant
	CodeTenantExists         // CreateTenant of a tenant that exists
	CodeFabricNotFound       // no such fabric
	CodeFabricExists         // CreateFabric of a fabric that exists
	CodeNotEmpty             // a tenant with fabrics, or a fabric with streams, is not deleted
	// CodeAuthenticationFailed refuses a Connect without a valid token
	// (missing, expired, wrongly signed), and ends a session whose token
	// expires. The connection is closed.
	CodeAuthenticationFailed
	// CodeAuthorizationFailed refuses a request the session's token does
	// not allow. It is the same whether or not what the request names
	// exists.
	CodeAuthorizationFailed
	// CodeRateLimited refuses a send that its tenant's publish rate limit
	// on the node would hold back too long (a batch above the limit's
	// burst, or a backlog of throttled sends). As with CodeDiskFull, the
	// producer's later sends are refused too, until it is created again
	// and resends in order.
	CodeRateLimited
)

var codeNames = map[ErrorCode]string{
	CodeUnknown:              "Unknown",
	CodeProtocol:             "ProtocolError",
	CodeVersionMismatch:      "VersionMismatch",
	CodeNotLeader:            "NotLeader",
	CodeStreamNotFound:       "StreamNotFound",
	CodeStreamExists:         "StreamExists",
	CodeInvalidName:          "InvalidName",
	CodeInvalidArgument:      "InvalidArgument",
	CodeProducerBusy:         "ProducerBusy",
	CodeConsumerBusy:         "ConsumerBusy",
	CodeSubscriptionBusy:     "SubscriptionBusy",
	CodeSubscriptionNotFound: "SubscriptionNotFound",
	CodeNotAllowed:           "NotAllowed",
	CodeTooLarge:             "TooLarge",
	CodeTimeout:              "Timeout",
	CodeConsumerAssignError:  "ConsumerAssignError",
	CodeServiceNotReady:      "ServiceNotReady",
	CodeProducerNotFound:     "ProducerNotFound",
	CodeConsumerNotFound:     "ConsumerNotFound",
	CodeClosed:               "Closed",
	CodeOutOfOrderSequence:   "OutOfOrderSequence",
	CodeLimitExceeded:        "LimitExceeded",
	CodeDiskFull:             "DiskFull",
	CodeBacklogQuotaExceeded: "ProducerBlockedQuotaExceededError",
	CodeTenantNotFound:       "TenantNotFound",
	CodeTenantExists:         "TenantExists",
	CodeFabricNotFound:       "FabricNotFound",
	CodeFabricExists:         "FabricExists",
	CodeNotEmpty:             "NotEmpty",
	CodeAuthenticationFailed: "AuthenticationFailed",
	CodeAuthorizationFailed:  "AuthorizationFailed",
	CodeRateLimited:          "RateLimited",
}

// String returns the code's name, as Pulsar users know it where it has one.
func (c ErrorCode) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("ErrorCode(%d)", uint16(c))
}

// Error makes *Error a Go error: "Code: message".
func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Message
}

// Is makes errors.Is(err, &Error{Code: c}) match any *Error with code c.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == "" && t.RequestID == 0
}
