// Package httpadmin serves fabriq's admin API over HTTP, with JSON bodies:
// tenants, fabrics, streams and subscriptions, as the CLI manages them
// over the binary protocol.
//
// It holds no rules of its own. Each request opens a client of the
// cluster (package client) that presents the request's bearer token, so
// authentication, authorization, routing to leaders and every refusal
// are the binary protocol's; this package maps routes and bodies to
// client calls and transport error codes to HTTP statuses.
package httpadmin
