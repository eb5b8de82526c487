package transport

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchMessages returns n messages of 1 KiB of random bytes, each with a
// key, a property and the times a producer sets.
func benchMessages(n int) []MessageData {
	rng := rand.New(rand.NewPCG(7, 7))
	msgs := make([]MessageData, n)
	for i := range msgs {
		p := make([]byte, 1024)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		msgs[i] = MessageData{
			Key:         fmt.Sprint("key-", i%10),
			Properties:  map[string]string{"trace": fmt.Sprint(i)},
			EventTime:   1_700_000_000_000 + int64(i),
			PublishTime: 1_700_000_000_000 + int64(i),
			SequenceID:  uint64(i),
			Payload:     p,
		}
	}
	return msgs
}

// benchSend is a producer's batch: 100 messages of 1 KiB.
func benchSend() *Send {
	return &Send{ProducerID: 1, Messages: benchMessages(100)}
}

// benchMessage is a push of 100 deliveries of 1 KiB.
func benchMessage() *Message {
	msgs := benchMessages(100)
	m := &Message{ConsumerID: 1, Messages: make([]Delivered, len(msgs))}
	for i, d := range msgs {
		d.ProducerName = "producer-1"
		m.Messages[i] = Delivered{Offset: 1_000_000 + uint64(i), Data: d}
	}
	return m
}

func benchEncode(b *testing.B, cmd Command) {
	buf, err := AppendFrame(nil, cmd)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		if buf, err = AppendFrame(buf[:0], cmd); err != nil {
			b.Fatal(err)
		}
	}
}

func benchDecode(b *testing.B, cmd Command) {
	frame, err := AppendFrame(nil, cmd)
	if err != nil {
		b.Fatal(err)
	}
	r := bytes.NewReader(frame)
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(frame)
		if _, err := ReadFrame(r, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeSend(b *testing.B)    { benchEncode(b, benchSend()) }
func BenchmarkDecodeSend(b *testing.B)    { benchDecode(b, benchSend()) }
func BenchmarkEncodeMessage(b *testing.B) { benchEncode(b, benchMessage()) }
func BenchmarkDecodeMessage(b *testing.B) { benchDecode(b, benchMessage()) }

// BenchmarkConnSend sends the 100-message batch over loopback TCP, one at
// a time: Send, then the peer's Receive.
func BenchmarkConnSend(b *testing.B) {
	cmd := benchSend()
	frame, _ := AppendFrame(nil, cmd)
	client, server := pair(b, Config{}, Config{})
	received := make(chan error)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			_, err := server.Receive()
			received <- err
			if err != nil {
				return
			}
		}
	}()
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := client.Send(context.Background(), cmd); err != nil {
			b.Fatal(err)
		}
		if err := <-received; err != nil {
			b.Fatal(err)
		}
	}
	client.Close()
	<-received
	<-done
}
