package subscription

import (
	"fmt"
	"slices"
)

// HashRange is an inclusive range of slots.
type HashRange struct {
	Start, End int
}

// AutoSplit assigns slots to key_shared consumers by consistent hashing
// (KS-3): each consumer has 100 points at Hash(name + index) mod Slots, and
// a slot belongs to the first point at or after it, wrapping. A consumer
// that leaves and comes back with the same name gets the same points, so
// the same slots.
type AutoSplit struct {
	r *ring
}

// NewAutoSplit builds the ring of the given consumer names.
func NewAutoSplit(names []string) *AutoSplit {
	return &AutoSplit{r: newRing(names, func(h uint32) uint32 { return h % Slots })}
}

// Owner returns the consumer that owns a slot, "" without consumers.
func (a *AutoSplit) Owner(slot int) string { return a.r.owner(uint32(slot)) }

// AssignError refuses a key_shared consumer's ranges; its text is part of
// the contract (the broker sends it with ConsumerAssignError).
type AssignError struct{ Text string }

func (e *AssignError) Error() string { return e.Text }

func assignError(format string, args ...any) error {
	return &AssignError{Text: fmt.Sprintf(format, args...)}
}

// Sticky holds the ranges key_shared consumers declared (KS-4).
type Sticky struct {
	ranges map[string][]HashRange
}

// NewSticky returns an empty assignment.
func NewSticky() *Sticky { return &Sticky{ranges: map[string][]HashRange{}} }

// Add records a consumer's ranges, refusing invalid ones and ones that
// overlap another consumer's with the contract's texts.
func (s *Sticky) Add(name string, ranges []HashRange) error {
	if len(ranges) == 0 {
		return assignError("Ranges for KeyShared policy must not be empty")
	}
	for i, r := range ranges {
		if r.Start < 0 || r.End >= Slots || r.Start > r.End {
			return assignError("Ranges for KeyShared policy are not valid: [%d, %d]", r.Start, r.End)
		}
		for _, o := range ranges[i+1:] {
			if r.Start <= o.End && o.Start <= r.End {
				return assignError("Ranges for KeyShared policy overlap: [%d, %d] and [%d, %d]", r.Start, r.End, o.Start, o.End)
			}
		}
	}
	names := make([]string, 0, len(s.ranges))
	for n := range s.ranges {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, other := range names {
		if other == name {
			continue
		}
		for _, o := range s.ranges[other] {
			for _, r := range ranges {
				if r.Start <= o.End && o.Start <= r.End {
					return assignError("Range conflict with consumer %s", other)
				}
			}
		}
	}
	s.ranges[name] = slices.Clone(ranges)
	return nil
}

// Remove forgets a consumer's ranges.
func (s *Sticky) Remove(name string) { delete(s.ranges, name) }

// Owner returns the consumer whose ranges hold a slot; "" when nobody
// covers it (its keys wait, KS-4).
func (s *Sticky) Owner(slot int) string {
	for name, rs := range s.ranges {
		for _, r := range rs {
			if slot >= r.Start && slot <= r.End {
				return name
			}
		}
	}
	return ""
}
