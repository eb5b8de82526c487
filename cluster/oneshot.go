package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// NetworkTransport's request types (hashicorp/raft's net_transport.go):
// the first byte of each request on its connections.
const (
	rpcRequestVote    uint8 = 1
	rpcTimeoutNow     uint8 = 3
	rpcRequestPreVote uint8 = 4
)

// oneShotBuffer is the write buffer of a one-shot request: a vote, a
// pre-vote or a TimeoutNow is a few hundred bytes.
const oneShotBuffer = 4 << 10

// oneShot sends one request of NetworkTransport's wire format to target,
// on a connection of its own that it closes once the answer is read: the
// request type's byte and the msgpack request, then the error string and
// the msgpack response back, as NetworkTransport's genericRPC does, under
// one deadline of transportTimeout.
//
// Votes, pre-votes and TimeoutNow go this way rather than through
// NetworkTransport's pool, where a connection costs 256 KiB of buffer at
// each end for as long as it stays open. An election is over in one
// round, and a transfer in one request: a losing candidate's connections,
// and a TimeoutNow's (the balancing after a restart hands over a third of
// a node's leaderships), sat unused until the group's idle leader closed
// its streams (30 s) or its quiet follower did (60 s); and after a voter's
// restart a vote on a pooled connection met its old process's close
// (cluster/DESIGN.md, "Votes on a connection of their own"). The voter's
// NetworkTransport serves the connection as any other and frees its
// goroutine and buffers at the close.
func (g *voteGate) oneShot(target raft.ServerAddress, rpcType uint8, args, resp any) error {
	conn, err := g.layer.Dial(target, transportTimeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(transportTimeout)); err != nil {
		return err
	}
	// NetworkTransport encodes with msgpackUseNewTimeFormat off, its
	// default and fabriq's.
	w := bufio.NewWriterSize(conn, oneShotBuffer)
	mh := &codec.MsgpackHandle{}
	mh.TimeNotBuiltin = true
	enc := codec.NewEncoder(w, mh)
	if err := w.WriteByte(rpcType); err != nil {
		return err
	}
	if err := enc.Encode(args); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	dec := codec.NewDecoder(bufio.NewReader(conn), &codec.MsgpackHandle{})
	var rpcErr string
	if err := dec.Decode(&rpcErr); err != nil {
		return fmt.Errorf("cluster: answer to a request of type %d: %w", rpcType, err)
	}
	if err := dec.Decode(resp); err != nil {
		return fmt.Errorf("cluster: answer to a request of type %d: %w", rpcType, err)
	}
	if rpcErr != "" {
		return errors.New(rpcErr)
	}
	return nil
}
