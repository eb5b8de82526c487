// Package auth owns who may do what on a fabriq cluster: the signed tokens
// (JWTs) clients present, the grants they carry, and the checks of a grant
// against an action on a tenant or fabric.
//
// A token's claims are its subject ("sub"), its expiry ("exp", optional),
// and either "superuser": true (operators and nodes: everything) or a list
// of grants, each naming a tenant, optionally one fabric of it, and the
// actions allowed there:
//
//	{"sub": "billing-app", "exp": 1767225600,
//	 "grants": [{"tenant": "acme", "fabric": "billing", "actions": ["produce", "consume"]}]}
//
// Actions are produce, consume and admin; admin allows the other two as
// well, and the management of the tenant's fabrics and streams. A grant
// without a fabric covers every fabric of its tenant, those created later
// included.
//
// Tokens are signed with an HMAC secret (HS256), or with an RSA, ECDSA or
// Ed25519 private key whose public key the nodes hold. A Verifier checks
// the signature, the algorithm (only those of its key: a token cannot
// choose "none" or switch HMAC for RSA), the expiry and the claims' shape;
// a Signer makes tokens (`fabriq token create`).
//
// The package knows nothing of the network or of streams beyond their
// tenant and fabric names: the broker's sessions ask it, per request.
package auth
