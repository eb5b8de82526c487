package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

// goroutinesIn counts the goroutines whose stack runs fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(fn+"(")) {
			count++
		}
	}
	return count
}

// An idle partition holds no goroutine for its write and ack paths: once
// its sends and acks are answered, their loops end, and the next send
// and ack start them again. A node of a thousand idle partitions would
// otherwise park thousands of stacks, which the garbage collector scans
// on every cycle.
func TestIdlePartitionsHoldNoWriteOrAckLoops(t *testing.T) {
	n := startNode(t, t.TempDir())
	c := newClient(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const stream, partitions = "persistent://acme/prod/idle", 4
	if err := createInFabric(ctx, c, stream, partitions, 1); err != nil {
		t.Fatal(err)
	}
	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: stream, Subscription: "s", Type: client.Shared, SubscriptionInitialPosition: client.Earliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	sendAndAck := func(round int) {
		t.Helper()
		const each = 40 // spread over the partitions by key
		for i := range each {
			if _, err := p.Send(ctx, &client.ProducerMessage{Key: fmt.Sprint(i), Payload: fmt.Appendf(nil, "%d-%d", round, i)}); err != nil {
				t.Fatalf("round %d: send %d: %v", round, i, err)
			}
		}
		for i := range each {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatalf("round %d: receive %d: %v", round, i, err)
			}
			if err := cons.Ack(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	loops := []string{"partition.(*Partition).proposeLoop", "partition.(*Partition).commitLoop", "partition.(*Partition).ackLoop"}
	idle := func() bool {
		for _, fn := range loops {
			if goroutinesIn(fn) > 0 {
				return false
			}
		}
		return true
	}
	sendAndAck(1)
	if idle() {
		t.Fatal("no write or ack loop ran after the sends and acks")
	}
	waitFor(t, ctx, "the idle partitions' write and ack loops to end", idle)
	if got := goroutinesIn("partition.(*latest[...]).run"); got != 0 {
		t.Fatalf("%d goroutines following the leadership of %d partitions, whose leadership has not changed", got, partitions)
	}
	// The next sends and acks start them again.
	sendAndAck(2)
	waitFor(t, ctx, "the acks of the second round", func() bool {
		info, err := c.DescribeStream(ctx, stream)
		if err != nil {
			return false
		}
		for _, part := range info.Partitions {
			for _, s := range part.Subscriptions {
				if s.Backlog != 0 {
					return false
				}
			}
		}
		return true
	})
}
