package client

import (
	"errors"
	"testing"
)

func TestParseURL(t *testing.T) {
	addrs, err := ParseURL("fabriq://127.0.0.1:6650,localhost:6651")
	if err != nil || len(addrs) != 2 || addrs[0] != "127.0.0.1:6650" || addrs[1] != "localhost:6651" {
		t.Fatalf("ParseURL = %v, %v", addrs, err)
	}
	addrs, secure, err := parseURL("fabriq+tls://node-1.example:6650")
	if err != nil || !secure || len(addrs) != 1 || addrs[0] != "node-1.example:6650" {
		t.Fatalf("parseURL(fabriq+tls://) = %v, %v, %v", addrs, secure, err)
	}
	if _, err := New(Options{URL: "fabriq://h:1", TLSCAFile: "ca.pem"}); !errors.Is(err, ErrBadURL) {
		t.Errorf("a CA with a plain URL: %v, want ErrBadURL", err)
	}
	for _, bad := range []string{"", "pulsar://h:1", "fabriq://", "fabriq://host", "fabriq://:6650", "fabriq://h:1,", "fabriq+tls://", "fabriq+ssl://h:1"} {
		if _, err := ParseURL(bad); !errors.Is(err, ErrBadURL) {
			t.Errorf("ParseURL(%q) err = %v, want ErrBadURL", bad, err)
		}
	}
}

// KS-2: Murmur3 x86 32-bit, seed 0, masked with 0x7fffffff; the slot is
// the hash mod 65536. Routing (MSG-3) uses the same hash.
func TestKeyHashVectors(t *testing.T) {
	vectors := []struct {
		key    string
		masked uint32
		slot   uint32
	}{
		{"Order-3459134", 964695987, 6067},
		{"key-1", 414258592, 5536},
		{"key-2", 1945654540, 21772},
		{"NONE_KEY", 504741539, 48803},
		{"hello", 613153351, 64071},
	}
	for _, v := range vectors {
		if got := KeyHash(v.key); got != v.masked || got%65536 != v.slot {
			t.Errorf("KeyHash(%q) = %d (slot %d), want %d (slot %d)", v.key, got, got%65536, v.masked, v.slot)
		}
	}
}

// MSG-3: a key always goes to the same partition; keyless messages move
// on at batch boundaries.
func TestRouting(t *testing.T) {
	p := &Producer{opts: ProducerOptions{BatchingMaxMessages: 3}, parts: make([]*partitionProducer, 4)}
	first := p.route(&ProducerMessage{Key: "k"})
	for range 10 {
		if p.route(&ProducerMessage{Key: "k"}) != first {
			t.Fatal("one key went to two partitions")
		}
	}
	if got := p.route(&ProducerMessage{Key: "k", OrderingKey: []byte("key-1")}); got != int(KeyHash("key-1")%4) {
		t.Fatalf("ordering key not used first: partition %d", got)
	}
	var seq []int
	for range 9 {
		seq = append(seq, p.route(&ProducerMessage{}))
	}
	changes := 0
	for i := 1; i < len(seq); i++ {
		if seq[i] != seq[i-1] {
			changes++
		}
	}
	if changes != 3 {
		t.Fatalf("keyless routing %v: want a new partition every 3 messages", seq)
	}
}

func TestNewRefusesBadURL(t *testing.T) {
	if _, err := New(Options{URL: "http://x:1"}); !errors.Is(err, ErrBadURL) {
		t.Fatalf("New with a bad URL: %v", err)
	}
}
