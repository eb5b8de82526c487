package cluster

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// RPCGroup is the group id under which a node's Mux carries node-to-node
// calls (RPCServer) instead of a Raft group's connections. Group ids of
// Raft groups never start with "_" except the metadata group's "_meta".
const RPCGroup = "_rpc"

// Limits and deadlines of node-to-node calls.
const (
	// RPCTimeout bounds a call whose context has no deadline.
	RPCTimeout = 10 * time.Second
	// rpcMaxHandler bounds how long the server works on one call,
	// whatever the caller asks.
	rpcMaxHandler = 30 * time.Second
	// rpcMaxFrame bounds a request or an answer.
	rpcMaxFrame = 16 << 20
	// rpcServerIdle is how long the server keeps a connection on which
	// no call comes; rpcClientIdle, shorter, how long a client keeps one
	// unused in its pool, so that it rarely picks one the server is
	// closing.
	rpcServerIdle = 2 * time.Minute
	rpcClientIdle = time.Minute
	// rpcMaxIdle is how many idle connections a client keeps per peer.
	rpcMaxIdle = 2
	// rpcVersion is the version byte of every request.
	rpcVersion = 1
)

// The wire format. After the connection header naming RPCGroup, a
// connection carries calls one at a time, each a request and its answer:
//
//	request  u32 length, then: u8 rpcVersion, u8 method length, method,
//	         u32 milliseconds the caller waits, msgpack body
//	answer   u32 length, then: u8 status (0 ok, 1 error), msgpack body
//	         (the method's result, or an RPCError)
//
// Lengths are big-endian and count the bytes after them, at most
// rpcMaxFrame. A malformed request closes the connection; an unknown
// method or a failed call is answered with an RPCError and the connection
// serves on.
const (
	rpcStatusOK    = 0
	rpcStatusError = 1
)

// RPCError is a call's failure as the called node answered it. Code is
// for the caller's logic (the service defines its codes), Message for
// people; Hint carries what the code needs (a service's choice, such as
// the id of the node to ask instead).
type RPCError struct {
	Code    string `msgpack:"c"`           // for the caller's logic
	Message string `msgpack:"m,omitempty"` // for people
	Hint    string `msgpack:"h,omitempty"` // what the code needs, if anything
}

func (e *RPCError) Error() string {
	if e.Hint != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Code, e.Message, e.Hint)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Codes of the RPCErrors the server itself answers.
const (
	RPCUnknownMethod = "unknown_method"
	RPCBadRequest    = "bad_request"
	RPCInternal      = "internal"
)

// RPCHandler serves one method: body is the request's msgpack body, from
// the calling connection's remote address (for a service that authorises
// by it). It returns the answer's msgpack body, or an error: an *RPCError
// goes back as it is, any other error as RPCInternal with its text. ctx
// ends at the caller's deadline or when the server closes.
type RPCHandler func(ctx context.Context, from net.Addr, body []byte) ([]byte, error)

// RPCHandle registers a typed method on s: the request body decodes into
// a Req, and the Resp returned is the answer.
func RPCHandle[Req, Resp any](s *RPCServer, method string, f func(ctx context.Context, from net.Addr, req *Req) (*Resp, error)) {
	s.Handle(method, func(ctx context.Context, from net.Addr, body []byte) ([]byte, error) {
		req := new(Req)
		if err := msgpack.Unmarshal(body, req); err != nil {
			return nil, &RPCError{Code: RPCBadRequest, Message: err.Error()}
		}
		resp, err := f(ctx, from, req)
		if err != nil {
			return nil, err
		}
		return msgpack.Marshal(resp)
	})
}

// writeFrame writes one length-prefixed frame of the parts.
func writeFrame(w io.Writer, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > rpcMaxFrame {
		return fmt.Errorf("cluster: rpc frame of %d bytes, limit %d", n, rpcMaxFrame)
	}
	buf := make([]byte, 4, 4+n)
	binary.BigEndian.PutUint32(buf, uint32(n))
	for _, p := range parts {
		buf = append(buf, p...)
	}
	_, err := w.Write(buf)
	return err
}

// readFrame reads one length-prefixed frame.
func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > rpcMaxFrame {
		return nil, fmt.Errorf("cluster: rpc frame of %d bytes, limit %d", n, rpcMaxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// rpcRequest is a request frame's content.
type rpcRequest struct {
	method string
	wait   time.Duration
	body   []byte
}

func appendRequestHead(method string, wait time.Duration) []byte {
	ms := min(max(wait.Milliseconds(), 1), int64(^uint32(0)))
	b := []byte{rpcVersion, byte(len(method))}
	b = append(b, method...)
	return binary.BigEndian.AppendUint32(b, uint32(ms))
}

func parseRequest(b []byte) (rpcRequest, error) {
	if len(b) < 2 || b[0] != rpcVersion {
		return rpcRequest{}, errors.New("cluster: rpc request: bad version")
	}
	n := int(b[1])
	if len(b) < 2+n+4 {
		return rpcRequest{}, errors.New("cluster: rpc request: short")
	}
	method := string(b[2 : 2+n])
	wait := time.Duration(binary.BigEndian.Uint32(b[2+n:])) * time.Millisecond
	return rpcRequest{method: method, wait: wait, body: b[2+n+4:]}, nil
}

// RPCServer answers node-to-node calls on a Mux, as the group RPCGroup.
// Register every method with Handle (or RPCHandle) before Start.
//
// Lifecycle: NewRPCServer, Handle..., Start, Close (before the Mux's).
// Close stops accepting, cancels the calls in progress, closes every
// connection and waits for the server's goroutines.
type RPCServer struct {
	mux      *Mux
	logger   *slog.Logger
	handlers map[string]RPCHandler

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	layer  *Layer
}

// NewRPCServer returns a server for mux. It starts nothing. A nil logger
// discards.
func NewRPCServer(mux *Mux, logger *slog.Logger) *RPCServer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &RPCServer{mux: mux, logger: logger.With("component", "rpc"), handlers: map[string]RPCHandler{}, ctx: ctx, cancel: cancel}
}

// Handle registers the handler of a method (at most 255 bytes). Call it
// before Start.
func (s *RPCServer) Handle(method string, h RPCHandler) {
	if len(method) == 0 || len(method) > 255 {
		panic(fmt.Sprintf("cluster: rpc method name %q", method))
	}
	s.handlers[method] = h
}

// Start registers the server on its mux and starts accepting calls.
func (s *RPCServer) Start() error {
	l, err := s.mux.Layer(RPCGroup)
	if err != nil {
		return err
	}
	s.layer = l
	s.wg.Add(1)
	go s.accept()
	return nil
}

// Close stops the server; it is idempotent.
func (s *RPCServer) Close() error {
	s.cancel()
	if s.layer != nil {
		s.layer.Close()
	}
	s.wg.Wait()
	return nil
}

func (s *RPCServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.layer.Accept()
		if err != nil {
			return // the layer is closed
		}
		s.wg.Add(1)
		go s.serve(c)
	}
}

// serve answers the calls of one connection until it closes, is idle for
// rpcServerIdle or sends a malformed request.
func (s *RPCServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		if err := c.SetReadDeadline(time.Now().Add(rpcServerIdle)); err != nil {
			return
		}
		b, err := readFrame(r)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.logger.Debug("rpc connection ends", "remote", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		req, err := parseRequest(b)
		if err != nil {
			s.logger.Debug("dropping an rpc connection", "remote", c.RemoteAddr().String(), "err", err)
			return
		}
		status, body := s.call(c.RemoteAddr(), req)
		if err := c.SetWriteDeadline(time.Now().Add(RPCTimeout)); err != nil {
			return
		}
		if err := writeFrame(c, []byte{status}, body); err != nil {
			return
		}
	}
}

// call runs one request's handler and returns the answer's status and
// body.
func (s *RPCServer) call(from net.Addr, req rpcRequest) (byte, []byte) {
	h := s.handlers[req.method]
	var body []byte
	var err error
	if h == nil {
		err = &RPCError{Code: RPCUnknownMethod, Message: req.method}
	} else {
		ctx, cancel := context.WithTimeout(s.ctx, min(req.wait, rpcMaxHandler))
		body, err = h(ctx, from, req.body)
		cancel()
	}
	if err == nil && len(body) > rpcMaxFrame-1 {
		err = fmt.Errorf("answer of %d bytes, limit %d", len(body), rpcMaxFrame-1)
	}
	if err == nil {
		return rpcStatusOK, body
	}
	var re *RPCError
	if !errors.As(err, &re) {
		re = &RPCError{Code: RPCInternal, Message: err.Error()}
	}
	b, merr := msgpack.Marshal(re)
	if merr != nil {
		b, _ = msgpack.Marshal(&RPCError{Code: RPCInternal})
	}
	return rpcStatusError, b
}
