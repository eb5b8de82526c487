// Package client is the Go SDK of fabriq, modelled on pulsar-client-go.
//
//	c, err := client.New(client.Options{URL: "fabriq://127.0.0.1:6650"})
//	p, err := c.CreateProducer(ctx, client.ProducerOptions{Stream: "persistent://t/f/s"})
//	id, err := p.Send(ctx, &client.ProducerMessage{Key: "k", Payload: []byte("hello")})
//	cons, err := c.Subscribe(ctx, client.ConsumerOptions{Stream: "persistent://t/f/s", Subscription: "sub"})
//	msg, err := cons.Receive(ctx)
//	err = cons.Ack(ctx, msg)
//
// A Client keeps one connection per node it talks to and looks up each
// partition's leader; producers and consumers follow NotLeader hints and
// reconnect with backoff when a connection drops. A producer numbers its
// messages and resends what was in flight after a reconnect with the same
// sequence ids, so the broker drops duplicates; a send is reported as a
// success only with the offset the broker stored it at, and a resent id the
// broker cannot prove stored fails with OutOfOrderSequence rather than
// being acknowledged. A send refused because the partition leader is short
// of disk space (DiskFull) is resent the same way, in order, with a
// backoff, until ProducerOptions.SendTimeout: then it fails with an error
// matching ErrSendTimeout and ErrDiskFull. A synchronous Send sends its
// batch at once; individual acks without receipts go in groups (1,000, or
// 5 ms after the first; Close sends what waits). Every blocking call takes a
// context and returns when it ends.
//
// SubscribeMulti reads several streams through one subscription: a list,
// or every stream of a fabric matching a pattern, kept in step with the
// fabric by a watch the node pushes (each push the whole matching list,
// so a missed one is made good by the next; the watch is opened again on
// another node when its connection goes, and a listing every 30 s is a
// backstop). Streams that appear are read from their first message. The
// MultiConsumer is one Consumer per stream behind one Receive.
//
// The package speaks the transport protocol and knows stream names
// (geofabric); it knows nothing of Raft or of how the broker stores
// messages.
package client
