package cluster

import (
	"context"
	"crypto/tls"
	"net"
)

// dialPeer opens a connection to another node's Raft port within ctx: TCP,
// and TLS over it when cfg is set (the handshake done before it returns,
// so that a peer that refuses the node's certificate fails the dial).
func dialPeer(ctx context.Context, addr string, cfg *tls.Config) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || cfg == nil {
		return nc, err
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return tc, nil
}
