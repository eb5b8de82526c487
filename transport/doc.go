// Package transport owns fabriq's wire protocol: the commands that clients
// and nodes exchange on the client port, how they are framed and encoded on
// a TCP connection, the limits that protect a node from its peers, and a
// connection type that either side, broker or client, drives.
//
// It knows nothing of what the commands mean: not streams or partitions,
// not subscriptions, not Raft or routing. The broker and the client give the
// commands their meaning. This package guarantees that what Receive returns
// is one whole, well-formed command, and that a peer's bytes can cause an
// error but never a panic, a hang without a deadline, or an allocation out
// of proportion to what the peer sent.
//
// A frame is a 4-byte big-endian length N, then N bytes: the msgpack array
// [type, command], type a CommandType and command the command's struct as a
// msgpack map keyed by its field tags. DESIGN.md beside this file gives the
// details, the limits, and the rules for changing the protocol without
// breaking older peers.
//
// Main types and functions:
//
//   - Command and one struct per CommandType (commands.go): the vocabulary.
//     Connect, Connected, Ping and Pong concern the connection; the rest
//     are requests, answers and pushes that the broker and client interpret.
//   - Error and ErrorCode (errors.go): a failure that crosses the wire, with
//     a stable code. An *Error is also a Go error. CodeOf gives the code for
//     this package's own errors.
//   - AppendFrame, WriteFrame and ReadFrame: the codec, on any byte slice,
//     io.Writer or io.Reader.
//   - Conn: a net.Conn that speaks the protocol. Send and SendAll may be
//     called from any goroutine and never interleave; Receive is for one
//     reader goroutine. Every read and write has a deadline (Config's
//     ReadIdleTimeout and WriteTimeout). Fail ends a connection with an
//     Error frame; KeepAlive pings a quiet one; Close is idempotent.
//   - Handshake (client side) and AwaitConnect (broker side): the Connect
//     and Connected exchange that opens every session, with the protocol
//     version check.
//
// A broker's session, in outline:
//
//	c, err := transport.NewConn(nc, cfg)
//	hello, err := transport.AwaitConnect(ctx, c) // refuses and closes on its own
//	err = c.Send(ctx, &transport.Connected{ProtocolVersion: transport.ProtocolVersion, ...})
//	go keepAlive(c) // a goroutine the session owns, running c.KeepAlive(ctx, 0)
//	for {
//		cmd, err := c.Receive()
//		if errors.Is(err, transport.ErrMalformed) || errors.Is(err, transport.ErrFrameTooLarge) {
//			c.Fail(transport.CodeOf(err), err) // an Error frame, then close
//			return
//		}
//		if err != nil { // the peer left, went quiet, or the network failed
//			c.Close()
//			return
//		}
//		switch cmd := cmd.(type) {
//		case *transport.Ping:
//			c.Send(ctx, &transport.Pong{})
//		case *transport.Send:
//			// ...
//		}
//	}
//
// The package starts no goroutine. Its errors are the sentinels ErrFrameTooLarge
// (with *FrameSizeError), ErrMalformed, ErrUnexpected and ErrClosed; a peer's
// Error frame, when a helper returns it, is an *Error. Test them with
// errors.Is and errors.As.
package transport
