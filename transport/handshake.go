package transport

import (
	"context"
	"errors"
	"fmt"
)

// Handshake opens a session from the client side. It sends hello (with
// ProtocolVersion when hello leaves it zero) and waits for the answer,
// within ctx and the Conn's ReadIdleTimeout. It returns the broker's
// Connected. A refusal is returned as the broker's *Error, wrapped: test it
// with errors.Is(err, &Error{Code: CodeVersionMismatch}) or errors.As. An
// answer that is neither Connected nor Error matches ErrUnexpected.
//
// On any failure the connection is closed.
func Handshake(ctx context.Context, c *Conn, hello *Connect) (*Connected, error) {
	var h Connect
	if hello != nil {
		h = *hello
	}
	if h.ProtocolVersion == 0 {
		h.ProtocolVersion = ProtocolVersion
	}
	if err := c.Send(ctx, &h); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("transport: handshake: %w", err)
	}
	cmd, err := c.receive(ctx)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("transport: handshake: %w", err)
	}
	switch m := cmd.(type) {
	case *Connected:
		if m.ProtocolVersion != h.ProtocolVersion {
			_ = c.Close()
			return nil, fmt.Errorf("transport: handshake: %w", &Error{
				Code:    CodeVersionMismatch,
				Message: fmt.Sprintf("broker answered protocol version %d to version %d", m.ProtocolVersion, h.ProtocolVersion),
			})
		}
		return m, nil
	case *Error:
		_ = c.Close()
		return nil, fmt.Errorf("transport: handshake refused: %w", m)
	}
	err = fmt.Errorf("%w: %s in answer to Connect", ErrUnexpected, cmd.Type())
	_ = c.Fail(CodeProtocol, err)
	return nil, fmt.Errorf("transport: handshake: %w", err)
}

// AwaitConnect opens a session from the broker side. It reads the client's
// first command, within ctx and the Conn's ReadIdleTimeout, requires it to
// be a Connect of this ProtocolVersion and returns it; the caller then makes
// its own checks (authentication) and answers Connected, or calls Fail.
//
// A first frame that is too large, malformed or not a Connect gets an Error
// frame (CodeTooLarge or CodeProtocol) and the connection is closed, as Fail
// does; the error returned matches ErrFrameTooLarge, ErrMalformed or
// ErrUnexpected. A Connect of another version gets Error{CodeVersionMismatch,
// "protocol version X not supported, this node speaks 1"}, which is also
// the *Error returned. Any other failure closes the connection.
func AwaitConnect(ctx context.Context, c *Conn) (*Connect, error) {
	cmd, err := c.receive(ctx)
	if err != nil {
		if errors.Is(err, ErrMalformed) || errors.Is(err, ErrFrameTooLarge) {
			_ = c.Fail(CodeOf(err), err)
		} else {
			_ = c.Close()
		}
		return nil, fmt.Errorf("transport: await connect: %w", err)
	}
	hello, ok := cmd.(*Connect)
	if !ok {
		err := fmt.Errorf("%w: %s before Connect", ErrUnexpected, cmd.Type())
		_ = c.Fail(CodeProtocol, err)
		return nil, err
	}
	if hello.ProtocolVersion != ProtocolVersion {
		err := &Error{
			Code:    CodeVersionMismatch,
			Message: fmt.Sprintf("protocol version %d not supported, this node speaks %d", hello.ProtocolVersion, ProtocolVersion),
		}
		_ = c.Fail(err.Code, err)
		return nil, err
	}
	return hello, nil
}
