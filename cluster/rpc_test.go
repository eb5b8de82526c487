package cluster

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

type echoReq struct {
	Text string `msgpack:"t"`
}

type echoResp struct {
	Text string `msgpack:"t"`
	From string `msgpack:"f"`
}

// rpcTestServer starts an RPC server on node with the test methods: echo
// (answers the text and the caller's address), fail (answers an
// RPCError), slow (tells on the channel returned how long it has, then
// waits until its context ends).
func rpcTestServer(t *testing.T, node *testNode) (*RPCServer, <-chan time.Duration) {
	t.Helper()
	entered := make(chan time.Duration, 16)
	s := NewRPCServer(node.mux, testLogger())
	RPCHandle(s, "echo", func(_ context.Context, from net.Addr, r *echoReq) (*echoResp, error) {
		return &echoResp{Text: r.Text, From: from.String()}, nil
	})
	RPCHandle(s, "fail", func(context.Context, net.Addr, *echoReq) (*echoResp, error) {
		return nil, &RPCError{Code: "not_leader", Message: "ask another", Hint: "node-7"}
	})
	RPCHandle(s, "slow", func(ctx context.Context, _ net.Addr, _ *echoReq) (*echoResp, error) {
		d, _ := ctx.Deadline()
		entered <- time.Until(d)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, entered
}

// Calls are answered, errors keep their code and hint, and sequential
// calls to one node reuse one connection.
func TestRPCCalls(t *testing.T) {
	nodes := newTestNodes(t, 1)
	rpcTestServer(t, nodes[0])
	c := NewRPCClient()
	defer c.Close()
	from := map[string]bool{}
	for range 10 {
		var resp echoResp
		if err := c.Call(ctxTimeout(t, 5*time.Second), nodes[0].addr(), "echo", &echoReq{Text: "hi"}, &resp); err != nil {
			t.Fatal(err)
		}
		if resp.Text != "hi" {
			t.Fatalf("answer %+v", resp)
		}
		from[resp.From] = true
	}
	if len(from) != 1 {
		t.Fatalf("10 sequential calls came from %d connections", len(from))
	}
	var re *RPCError
	err := c.Call(ctxTimeout(t, 5*time.Second), nodes[0].addr(), "fail", &echoReq{}, nil)
	if !errors.As(err, &re) || re.Code != "not_leader" || re.Hint != "node-7" {
		t.Fatalf("fail answered %v", err)
	}
	err = c.Call(ctxTimeout(t, 5*time.Second), nodes[0].addr(), "nope", &echoReq{}, nil)
	if !errors.As(err, &re) || re.Code != RPCUnknownMethod {
		t.Fatalf("an unknown method answered %v", err)
	}
	err = c.Call(ctxTimeout(t, 5*time.Second), nodes[0].addr(), "echo", "not a request", nil)
	if !errors.As(err, &re) || re.Code != RPCBadRequest {
		t.Fatalf("a bad request answered %v", err)
	}
	// The connection survived the errors.
	var resp echoResp
	if err := c.Call(ctxTimeout(t, 5*time.Second), nodes[0].addr(), "echo", &echoReq{Text: "again"}, &resp); err != nil || !from[resp.From] {
		t.Fatalf("after the errors: %v from %s", err, resp.From)
	}
}

// A call ends at its deadline, and the server's handler gets the
// caller's deadline; a cancelled call ends too.
func TestRPCDeadlines(t *testing.T) {
	nodes := newTestNodes(t, 1)
	_, entered := rpcTestServer(t, nodes[0])
	c := NewRPCClient()
	defer c.Close()
	if err := ends(t, func() error {
		return c.Call(ctxTimeout(t, 300*time.Millisecond), nodes[0].addr(), "slow", &echoReq{}, nil)
	}); err == nil {
		t.Fatal("a slow call succeeded")
	}
	if d := <-entered; d <= 0 || d > 300*time.Millisecond {
		t.Fatalf("the handler of a call with a 300ms deadline had %v", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	if err := ends(t, func() error { return c.Call(ctx, nodes[0].addr(), "slow", &echoReq{}, nil) }); err == nil {
		t.Fatal("a cancelled call succeeded")
	}
}

// ends runs call and returns its error; a call still running after 30 s
// (a hundred times the deadlines above) fails the test instead of
// hanging it.
func ends(t *testing.T, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not end")
		return nil
	}
}

// Pooled connections whose server went away are replaced: the next call
// goes through on a new connection; concurrent calls each get one.
func TestRPCPoolSurvivesServerRestart(t *testing.T) {
	nodes := newTestNodes(t, 1)
	s, _ := rpcTestServer(t, nodes[0])
	c := NewRPCClient()
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.Call(ctxTimeout(t, 5*time.Second), nodes[0].addr(), "echo", &echoReq{Text: "x"}, &echoResp{})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	rpcTestServer(t, nodes[0])
	if err := c.Call(ctxTimeout(t, 5*time.Second), nodes[0].addr(), "echo", &echoReq{Text: "y"}, &echoResp{}); err != nil {
		t.Fatalf("a call after the server restarted: %v", err)
	}
	c.Close()
	if err := c.Call(ctxTimeout(t, 5*time.Second), nodes[0].addr(), "echo", &echoReq{}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("a call after Close: %v", err)
	}
}

// A malformed request closes its connection and nothing else; closing the
// server ends the calls in progress.
func TestRPCBadFramesAndClose(t *testing.T) {
	nodes := newTestNodes(t, 1)
	s, entered := rpcTestServer(t, nodes[0])
	raw, err := net.Dial("tcp", nodes[0].addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write(append(appendHeader(nil, RPCGroup), 0, 0, 0, 3, 9, 9, 9)); err != nil {
		t.Fatal(err)
	}
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := raw.Read(make([]byte, 1)); err == nil {
		t.Fatal("a bad request was answered")
	}
	c := NewRPCClient()
	defer c.Close()
	if err := c.Call(ctxTimeout(t, 5*time.Second), nodes[0].addr(), "echo", &echoReq{}, nil); err != nil {
		t.Fatalf("after a bad request: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- c.Call(ctxTimeout(t, 20*time.Second), nodes[0].addr(), "slow", &echoReq{}, nil)
	}()
	<-entered
	s.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("closing the server did not end a call in progress")
	}
}
