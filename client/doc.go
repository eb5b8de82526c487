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
// matching ErrSendTimeout and ErrDiskFull. Every blocking call takes a
// context and returns when it ends.
//
// The package speaks the transport protocol and knows stream names
// (geofabric); it knows nothing of Raft or of how the broker stores
// messages.
package client
