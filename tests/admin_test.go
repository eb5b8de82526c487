package tests

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/transport"
)

// answerLoser is a TCP proxy to a node that loses one answer: on the
// first connection whose client sent marker, it closes both sides as soon
// as the node answers, as a connection that drops at the wrong time does.
// Every other connection passes through.
type answerLoser struct {
	ln     net.Listener
	target string
	marker []byte
	mu     sync.Mutex
	done   bool // the answer was lost
	wg     sync.WaitGroup
}

func newAnswerLoser(t *testing.T, target string, marker []byte) *answerLoser {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &answerLoser{ln: ln, target: target, marker: marker}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *answerLoser) lost() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

func (p *answerLoser) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

func (p *answerLoser) serve(c net.Conn) {
	defer c.Close()
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	defer s.Close()
	var mu sync.Mutex
	asked := false // this connection carried the marker, the answer to lose is next
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // client to node
		defer wg.Done()
		defer s.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if bytes.Contains(buf[:n], p.marker) {
					p.mu.Lock()
					mu.Lock()
					asked = asked || !p.done
					mu.Unlock()
					p.mu.Unlock()
				}
				if _, werr := s.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for { // node to client
		n, err := s.Read(buf)
		if n > 0 {
			mu.Lock()
			lose := asked
			mu.Unlock()
			if lose {
				p.mu.Lock()
				p.done = true
				p.mu.Unlock()
				c.Close()
				break
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	c.Close()
	s.Close()
	io.Copy(io.Discard, s)
	wg.Wait()
}

// A create whose answer is lost is retried by the client, and the retry,
// which finds the stream the first attempt made, succeeds: the caller
// asked once and gets the stream, not StreamExists. A stream that was
// there before is still StreamExists.
func TestCreateStreamAnswerLost(t *testing.T) {
	n := startNode(t, "n1", t.TempDir())
	ctx := testContext(t, time.Minute)
	const stream = "persistent://acme/retry/made-once"
	setup := newClient(t, n.url())
	if err := ensureFabric(ctx, setup, stream); err != nil {
		t.Fatal(err)
	}
	proxy := newAnswerLoser(t, n.addr, []byte(stream))
	c := newClient(t, "fabriq://"+proxy.ln.Addr().String())
	if err := c.CreateStream(ctx, stream, 3, 1); err != nil {
		t.Fatalf("create with its answer lost: %v", err)
	}
	if !proxy.lost() {
		t.Fatal("the proxy lost no answer: the test tested nothing")
	}
	info, err := c.DescribeStream(ctx, stream)
	if err != nil || len(info.Partitions) != 3 {
		t.Fatalf("describe after the create: %+v, %v", info, err)
	}
	err = c.CreateStream(ctx, stream, 3, 1)
	if transport.CodeOf(err) != transport.CodeStreamExists {
		t.Fatalf("a second create of the stream: %v, want StreamExists", err)
	}
}
