package subscription

import (
	"strconv"

	"github.com/twmb/murmur3"
)

// Slots is the size of the key hash space of key_shared subscriptions.
const Slots = 65536

// NoneKey is the sticky key of a message with neither key nor ordering
// key (KS-1).
const NoneKey = "NONE_KEY"

// StickyKey returns the key a message sticks to (KS-1): its ordering key
// if set, else its key, else NoneKey.
func StickyKey(orderingKey []byte, key string) string {
	switch {
	case len(orderingKey) > 0:
		return string(orderingKey)
	case key != "":
		return key
	}
	return NoneKey
}

// Hash is Murmur3 x86 32-bit with seed 0, masked with 0x7fffffff (KS-2).
func Hash(s string) uint32 { return murmur3.Sum32([]byte(s)) & 0x7fffffff }

// Slot is a key's slot, Hash mod Slots (KS-2).
func Slot(key string) int { return int(Hash(key) % Slots) }

// pointName is the ring point i of a consumer: Murmur3 of name + index.
func pointName(name string, i int) string { return name + strconv.Itoa(i) }
