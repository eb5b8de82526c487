package geofabric

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Scheme is the only stream domain fabriq has: every stream is persistent.
const Scheme = "persistent://"

const (
	// MaxPartitions is the most partitions a stream may have.
	MaxPartitions = 1024
	// maxSegment is the longest tenant, fabric or stream segment.
	maxSegment   = 200
	partitionSep = "-partition-"
)

// ErrInvalidName is matched (errors.Is) by every name error.
var ErrInvalidName = errors.New("invalid name")

// Stream is a stream's name.
type Stream struct {
	Tenant string
	Fabric string
	Name   string
}

// Partition is one partition of a stream: Index is -1 for the single
// partition of an unpartitioned stream.
type Partition struct {
	Stream Stream
	Index  int
}

func nameError(s, why string) error {
	return fmt.Errorf("%w %q: %s", ErrInvalidName, s, why)
}

// checkSegment validates one segment of a name: letters, digits and
// - _ . = : are allowed.
func checkSegment(full, what, seg string) error {
	if seg == "" {
		return nameError(full, what+" is empty")
	}
	if len(seg) > maxSegment {
		return nameError(full, fmt.Sprintf("%s is longer than %d bytes", what, maxSegment))
	}
	for _, r := range seg {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == '-', r == '_', r == '.', r == '=', r == ':':
		default:
			return nameError(full, fmt.Sprintf("%s has the character %q (allowed: letters, digits, - _ . = :)", what, r))
		}
	}
	return nil
}

// ParseStream parses persistent://TENANT/FABRIC/STREAM. A name that names a
// partition (ends in -partition-K) is refused: use ParsePartition.
func ParseStream(s string) (Stream, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		return Stream{}, nameError(s, "a stream name starts with "+Scheme)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return Stream{}, nameError(s, "a stream name is "+Scheme+"TENANT/FABRIC/STREAM")
	}
	n := Stream{Tenant: parts[0], Fabric: parts[1], Name: parts[2]}
	for _, c := range []struct{ what, seg string }{{"tenant", n.Tenant}, {"fabric", n.Fabric}, {"stream", n.Name}} {
		if err := checkSegment(s, c.what, c.seg); err != nil {
			return Stream{}, err
		}
	}
	if _, _, ok := splitPartition(n.Name); ok {
		return Stream{}, nameError(s, "a stream name may not end in "+partitionSep+"N: that names a partition")
	}
	return n, nil
}

// splitPartition splits NAME-partition-K.
func splitPartition(name string) (string, int, bool) {
	i := strings.LastIndex(name, partitionSep)
	if i <= 0 {
		return "", 0, false
	}
	digits := name[i+len(partitionSep):]
	k, err := strconv.Atoi(digits)
	if err != nil || k < 0 || strconv.Itoa(k) != digits {
		return "", 0, false
	}
	return name[:i], k, true
}

// ParsePartition parses a partition name: a stream name, or a stream name
// followed by -partition-K.
func ParsePartition(s string) (Partition, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	if ok {
		parts := strings.Split(rest, "/")
		if len(parts) == 3 {
			if base, k, ok := splitPartition(parts[2]); ok {
				st, err := ParseStream(Scheme + parts[0] + "/" + parts[1] + "/" + base)
				if err != nil {
					return Partition{}, err
				}
				if k >= MaxPartitions {
					return Partition{}, nameError(s, fmt.Sprintf("partition index %d is not below %d", k, MaxPartitions))
				}
				return Partition{Stream: st, Index: k}, nil
			}
		}
	}
	st, err := ParseStream(s)
	if err != nil {
		return Partition{}, err
	}
	return Partition{Stream: st, Index: -1}, nil
}

// ParseFabric parses TENANT/FABRIC, with or without the scheme.
func ParseFabric(s string) (tenant, fabric string, err error) {
	rest := strings.TrimPrefix(s, Scheme)
	parts := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	if len(parts) != 2 {
		return "", "", nameError(s, "a fabric is TENANT/FABRIC")
	}
	if err := checkSegment(s, "tenant", parts[0]); err != nil {
		return "", "", err
	}
	if err := checkSegment(s, "fabric", parts[1]); err != nil {
		return "", "", err
	}
	return parts[0], parts[1], nil
}

// String returns persistent://TENANT/FABRIC/STREAM.
func (n Stream) String() string { return Scheme + n.Tenant + "/" + n.Fabric + "/" + n.Name }

// FabricName returns TENANT/FABRIC.
func (n Stream) FabricName() string { return n.Tenant + "/" + n.Fabric }

// Partition returns partition i of the stream when it has n partitions.
func (n Stream) Partition(i, partitions int) Partition {
	if partitions == 1 {
		return Partition{Stream: n, Index: -1}
	}
	return Partition{Stream: n, Index: i}
}

// Partitions returns the names of all n partitions of the stream.
func (n Stream) Partitions(partitions int) []Partition {
	out := make([]Partition, partitions)
	for i := range out {
		out[i] = n.Partition(i, partitions)
	}
	return out
}

// String returns the partition's full name.
func (p Partition) String() string {
	if p.Index < 0 {
		return p.Stream.String()
	}
	return p.Stream.String() + partitionSep + strconv.Itoa(p.Index)
}

// Number is the partition's position in its stream: 0 for an unpartitioned
// stream's only partition.
func (p Partition) Number() int { return max(p.Index, 0) }

// ValidatePartitions checks a partition count.
func ValidatePartitions(n int) error {
	if n < 1 || n > MaxPartitions {
		return fmt.Errorf("partitions must be in 1..%d, not %d", MaxPartitions, n)
	}
	return nil
}
