// Package pulsar serves Apache Pulsar's binary protocol on the client
// port, so that unmodified Pulsar clients produce to and consume from
// fabriq.
//
// It holds no broker logic. A connection whose first bytes are a Pulsar
// frame gets a Codec (transport.Codec) that translates each Pulsar command
// into the fabriq command that says the same, and each fabriq answer back;
// the session engine (broker/session) serves the connection as it serves
// fabriq's own clients: authentication, authorization, limits, the
// partitions, subscriptions and roles are theirs, with no second copy.
//
// What the translation keeps per connection: the kind of each request in
// flight (a Pulsar lookup's failure is a LOOKUP_RESPONSE, an ack's answer
// an ACK_RESPONSE), each producer's and consumer's partition (message ids
// carry it) and each consumer's stream (for GET_LAST_MESSAGE_ID).
// Requests fabriq has no counterpart for (schemas, consumer stats,
// transactions) are refused with an ERROR, in order with the connection's
// other answers: the codec turns them into a Ping, whose Pong it answers
// with the refusal.
//
// Names: persistent://TENANT/NAMESPACE/TOPIC is fabriq's
// persistent://TENANT/FABRIC/STREAM, a short name is one of
// public/default, and TOPIC-partition-N is partition N. Message ids are
// pulsarwire's: ledger 1, entry the offset (of a batch's first message in
// a send receipt), so an id survives a leader change.
package pulsar
