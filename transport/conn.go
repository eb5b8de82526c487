package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes a Conn. The zero value of every field means its default.
type Config struct {
	// MaxFrameSize is the largest frame length (without the 4-byte prefix)
	// that Receive accepts and Send writes. Default DefaultMaxFrameSize, at
	// most MaxFrameSizeLimit. A broker tells its clients its limit in
	// Connected.MaxFrameSize.
	MaxFrameSize int
	// WriteTimeout bounds every write; a Send's ctx may shorten it. A peer
	// that does not take a frame within it is taken as dead and the
	// connection is closed. Default 10s.
	WriteTimeout time.Duration
	// ReadIdleTimeout bounds every Receive: a peer that sends no whole frame
	// for this long is taken as dead. Both sides keep a quiet connection
	// alive with Ping, sent by KeepAlive. Default 60s.
	ReadIdleTimeout time.Duration
	// Logger receives connection events (a connection failed and closed) at
	// debug level. Nil discards them.
	Logger *slog.Logger
	// Codec is the connection's wire protocol; nil is fabriq's own
	// (FrameCodec). One Codec serves one connection.
	Codec Codec
}

// DefaultConfig returns the configuration used where a field is zero.
func DefaultConfig() Config {
	return Config{
		MaxFrameSize:    DefaultMaxFrameSize,
		WriteTimeout:    10 * time.Second,
		ReadIdleTimeout: 60 * time.Second,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = d.MaxFrameSize
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.ReadIdleTimeout == 0 {
		c.ReadIdleTimeout = d.ReadIdleTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Codec == nil {
		c.Codec = FrameCodec{}
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.MaxFrameSize < 0 || c.MaxFrameSize > MaxFrameSizeLimit:
		return fmt.Errorf("transport: MaxFrameSize %d not in 1..%d", c.MaxFrameSize, MaxFrameSizeLimit)
	case c.WriteTimeout < 0:
		return fmt.Errorf("transport: WriteTimeout %v is negative", c.WriteTimeout)
	case c.ReadIdleTimeout < 0:
		return fmt.Errorf("transport: ReadIdleTimeout %v is negative", c.ReadIdleTimeout)
	}
	return nil
}

const (
	// readBufferSize is the buffered reader's size: many small frames per
	// read system call; a large body is read straight into its buffer.
	readBufferSize = 16 << 10
	// failTimeout bounds the Error frame that Fail sends.
	failTimeout = time.Second
	// lingerTimeout bounds how long Fail drains what the peer still sends,
	// so that the close does not reset the connection before the peer has
	// read the Error frame.
	lingerTimeout = 500 * time.Millisecond
	// maxFailMessage bounds the message of the Error frame Fail sends.
	maxFailMessage = 1 << 10
)

// aLongTimeAgo is a deadline in the past: it interrupts a blocked read or
// write.
var aLongTimeAgo = time.Unix(1, 0)

// Conn is one protocol connection, on either side. Send, SendAll, Fail,
// KeepAlive, Close and RemoteAddr are safe for concurrent use; Receive is
// for a single goroutine (the connection's reader) at a time.
//
// A Conn starts no goroutine. Close closes the connection: a Receive or
// Send blocked on it returns, and every later one returns ErrClosed.
type Conn struct {
	nc  net.Conn
	cfg Config
	log *slog.Logger

	// wmu is the write lock, a token in a channel so that waiting for it
	// honours ctx.
	wmu      chan struct{}
	lastSend atomic.Int64 // Unix nanoseconds of the last write

	// The reader's own: only Receive, Handshake and AwaitConnect use them.
	br   *bufio.Reader
	rerr error // sticky: once a read fails, the stream is out of frame

	closing   chan struct{}
	closeOnce sync.Once
}

// NewConn wraps an established connection. The Conn owns nc from then on:
// Close closes it.
func NewConn(nc net.Conn, cfg Config) (*Conn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Conn{
		nc:      nc,
		cfg:     cfg,
		log:     cfg.Logger.With("remote", addrString(nc.RemoteAddr())),
		wmu:     make(chan struct{}, 1),
		br:      bufio.NewReaderSize(nc, readBufferSize),
		closing: make(chan struct{}),
	}
	c.lastSend.Store(time.Now().UnixNano())
	return c, nil
}

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Send writes one command. See SendAll.
func (c *Conn) Send(ctx context.Context, cmd Command) error {
	return c.SendAll(ctx, cmd)
}

// SendAll encodes cmds and writes them, in order, in one write: a producer
// or dispatcher can queue several commands and pay for one system call.
// Concurrent sends never interleave.
//
// The write's deadline is the earlier of ctx's deadline and WriteTimeout
// from now, and cancelling ctx interrupts it. If nothing has been written
// when ctx ends, SendAll returns ctx's error and the connection is
// unaffected. A write that fails part way would leave the peer reading the
// stream out of frame, so any write failure closes the connection; the
// error then matches both ErrClosed and its cause.
//
// A command whose frame is above Config.MaxFrameSize is refused with a
// *FrameSizeError before anything is written.
func (c *Conn) SendAll(ctx context.Context, cmds ...Command) error {
	if len(cmds) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("transport: send: %w", err)
	}
	bp := getBuffer()
	defer putBuffer(bp)
	b := (*bp)[:0]
	for _, cmd := range cmds {
		var err error
		b, err = c.cfg.Codec.Append(b, cmd, c.cfg.MaxFrameSize)
		*bp = b
		if err != nil {
			return err
		}
	}
	if len(b) == 0 {
		return nil // nothing the peer's protocol says
	}
	select {
	case c.wmu <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("transport: send: %w", ctx.Err())
	case <-c.closing:
		return ErrClosed
	}
	defer func() { <-c.wmu }()
	if c.isClosed() {
		return ErrClosed
	}
	return c.write(ctx, b)
}

// write writes b under the write lock.
func (c *Conn) write(ctx context.Context, b []byte) error {
	deadline := time.Now().Add(c.cfg.WriteTimeout)
	ctxDeadline, ok := ctx.Deadline()
	byCtx := ok && ctxDeadline.Before(deadline)
	if byCtx {
		deadline = ctxDeadline
	}
	if err := c.nc.SetWriteDeadline(deadline); err != nil {
		return c.broken(err)
	}
	var stop func() bool
	var interrupted chan struct{}
	if ctx.Done() != nil {
		interrupted = make(chan struct{})
		stop = context.AfterFunc(ctx, func() {
			_ = c.nc.SetWriteDeadline(aLongTimeAgo)
			close(interrupted)
		})
	}
	n, err := c.nc.Write(b)
	if stop != nil && !stop() {
		// The interruption has run or is running: let it finish, so that it
		// cannot clobber the next write's deadline.
		<-interrupted
	}
	if err == nil {
		c.lastSend.Store(time.Now().UnixNano())
		return nil
	}
	if !c.isClosed() {
		if cerr := contextError(ctx, err, byCtx); cerr != nil {
			err = cerr
			if n == 0 {
				return fmt.Errorf("transport: send: %w", err)
			}
		}
	}
	return c.broken(err)
}

// contextError returns ctx's error if ctx, rather than the connection,
// ended the operation that failed with err.
func contextError(ctx context.Context, err error, byCtx bool) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if byCtx && errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return nil
}

// broken closes the connection after a write failed with err.
func (c *Conn) broken(err error) error {
	if c.isClosed() {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	c.log.Debug("transport: write failed, closing connection", "err", err)
	_ = c.Close()
	return fmt.Errorf("%w: send failed: %w", ErrClosed, err)
}

// Receive reads and decodes the next command. It waits at most
// ReadIdleTimeout for the whole frame.
//
// Errors are as ReadFrame's: io.EOF when the peer closed the connection
// between frames, a *FrameSizeError, ErrMalformed, or a wrapped read error
// (a timeout matches os.ErrDeadlineExceeded); ErrClosed after Close. Once
// Receive has failed it returns the same error again: the stream is out of
// frame, and the caller closes the connection, with Fail to tell the peer
// why (CodeOf chooses the code).
//
// Receive returns every command, Ping and Pong included: answering a Ping
// with a Pong is the caller's.
func (c *Conn) Receive() (Command, error) {
	return c.receive(context.Background())
}

// ReceiveSized is Receive that also returns the length of the command's
// frame, without its 4-byte prefix: about the memory the decoded command
// holds, for a reader that bounds what it queues by bytes.
func (c *Conn) ReceiveSized() (Command, int, error) {
	return c.receiveSized(context.Background())
}

// receive is Receive, bounded and interruptible by ctx as well.
func (c *Conn) receive(ctx context.Context) (Command, error) {
	cmd, _, err := c.receiveSized(ctx)
	return cmd, err
}

// receiveSized is ReceiveSized, bounded and interruptible by ctx.
func (c *Conn) receiveSized(ctx context.Context) (Command, int, error) {
	if c.rerr != nil {
		return nil, 0, c.rerr
	}
	if c.isClosed() {
		c.rerr = ErrClosed
		return nil, 0, ErrClosed
	}
	deadline := time.Now().Add(c.cfg.ReadIdleTimeout)
	ctxDeadline, ok := ctx.Deadline()
	byCtx := ok && ctxDeadline.Before(deadline)
	if byCtx {
		deadline = ctxDeadline
	}
	if err := c.nc.SetReadDeadline(deadline); err != nil {
		c.rerr = c.readError(err)
		return nil, 0, c.rerr
	}
	var stop func() bool
	var interrupted chan struct{}
	if ctx.Done() != nil {
		interrupted = make(chan struct{})
		stop = context.AfterFunc(ctx, func() {
			_ = c.nc.SetReadDeadline(aLongTimeAgo)
			close(interrupted)
		})
	}
	cmd, n, err := c.cfg.Codec.Read(c.br, c.cfg.MaxFrameSize)
	if stop != nil && !stop() {
		<-interrupted
	}
	if err != nil {
		if cerr := contextError(ctx, err, byCtx); cerr != nil && !c.isClosed() {
			err = fmt.Errorf("transport: receive: %w", cerr)
		}
		c.rerr = c.readError(err)
		return nil, 0, c.rerr
	}
	return cmd, n, nil
}

// readError makes a read error on a closed Conn match ErrClosed.
func (c *Conn) readError(err error) error {
	if c.isClosed() && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// Fail tells the peer why the connection ends and closes it: it sends
// Error{Code: code, Message: err's text (an *Error's own Message)} with a
// short deadline, best effort, then closes. It is what a broker does with a frame that is too large or
// malformed: the offending connection gets an Error frame and is closed,
// and nothing else is disturbed. Fail returns Close's error.
//
// After the Error frame, Fail shuts down its side for writing and discards
// what the peer still sends for up to half a second, until the peer closes:
// closing a TCP connection with unread data resets it, and a reset can
// destroy the Error frame before the peer reads it.
func (c *Conn) Fail(code ErrorCode, err error) error {
	var msg string
	var e *Error
	switch {
	case errors.As(err, &e):
		msg = e.Message
	case err != nil:
		msg = err.Error()
	}
	if len(msg) > maxFailMessage {
		msg = msg[:maxFailMessage]
	}
	ctx, cancel := context.WithTimeout(context.Background(), failTimeout)
	defer cancel()
	sendErr := c.Send(ctx, &Error{Code: code, Message: msg})
	if sendErr == nil {
		c.linger()
	}
	c.log.Debug("transport: connection failed, closing", "code", code, "reason", err, "sent", sendErr == nil)
	return c.Close()
}

// linger half-closes the connection and drains it until the peer closes
// its side or lingerTimeout passes.
func (c *Conn) linger() {
	cw, ok := c.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	if c.nc.SetReadDeadline(time.Now().Add(lingerTimeout)) != nil {
		return
	}
	_, _ = io.Copy(io.Discard, c.nc)
}

// KeepAlive sends a Ping whenever nothing has been sent for interval, so
// that the peer's ReadIdleTimeout does not expire on a quiet connection.
// An interval of zero or less means a third of ReadIdleTimeout (peers are
// expected to share it). KeepAlive blocks until ctx ends (it then returns
// nil), the connection closes or a Ping fails; the caller runs it in a
// goroutine it owns.
func (c *Conn) KeepAlive(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = c.cfg.ReadIdleTimeout / 3
	}
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.closing:
			return ErrClosed
		case <-t.C:
		}
		quiet := time.Since(time.Unix(0, c.lastSend.Load()))
		if quiet >= interval {
			if err := c.Send(ctx, &Ping{}); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			quiet = 0
		}
		t.Reset(interval - quiet)
	}
}

// Close closes the connection. A blocked Receive or Send returns; later
// calls of any method return ErrClosed. Calling Close again does nothing
// and returns nil.
func (c *Conn) Close() error {
	err := error(nil)
	c.closeOnce.Do(func() {
		close(c.closing)
		err = c.nc.Close()
	})
	return err
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

func (c *Conn) isClosed() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}
