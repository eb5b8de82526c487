package geofabric

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Scheme is the only stream domain fabriq has: every stream is persistent.
const Scheme = "persistent://"

// DefaultTenant and DefaultFabric hold the streams named by a short name:
// "orders" is persistent://public/default/orders, as in Pulsar. Every
// cluster has them from the start.
const (
	DefaultTenant = "public"
	DefaultFabric = "default"
)

const (
	// MaxPartitions is the most partitions a stream may have.
	MaxPartitions = 1024
	// maxSegment is the longest tenant, fabric or stream segment.
	maxSegment   = 200
	partitionSep = "-partition-"
	// MaxName is the longest partition name, in bytes: the scheme, three
	// segments of maxSegment bytes, their separators and the longest
	// partition suffix.
	MaxName = len(Scheme) + 3*maxSegment + 2 + len(partitionSep) + 4
	// MaxClientName is the longest producer, subscription or consumer
	// name, in bytes.
	MaxClientName = 256
	// quoteLimit is how many bytes of a refused name an error quotes.
	quoteLimit = 80
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
	return fmt.Errorf("%w %s: %s", ErrInvalidName, quote(s), why)
}

// quote quotes a name for an error, cut to quoteLimit bytes: an error
// about a name of megabytes need not repeat it.
func quote(s string) string {
	if len(s) <= quoteLimit {
		return strconv.Quote(s)
	}
	cut := quoteLimit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// checkUTF8 refuses a name that is not valid UTF-8, naming the first bad
// byte: ranging over such a string would read each bad byte as U+FFFD.
func checkUTF8(s string) error {
	if utf8.ValidString(s) {
		return nil
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return nameError(s, fmt.Sprintf("is not valid UTF-8 (byte %#x at %d)", s[i], i))
		}
		i += size
	}
	return nameError(s, "is not valid UTF-8")
}

// checkSegment validates one segment of a name: letters, digits and
// - _ . = : are allowed, but not the segments "." and "..", which file
// systems and URLs read as "this" and "the parent".
func checkSegment(full, what, seg string) error {
	if seg == "" {
		return nameError(full, what+" is empty")
	}
	if len(seg) > maxSegment {
		return nameError(full, fmt.Sprintf("%s is longer than %d bytes", what, maxSegment))
	}
	if seg == "." || seg == ".." {
		return nameError(full, fmt.Sprintf("%s may not be %q", what, seg))
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

// checkName refuses what no name can be: too long, or not UTF-8.
func checkName(s string) error {
	if len(s) > MaxName {
		return nameError(s, fmt.Sprintf("is longer than %d bytes", MaxName))
	}
	return checkUTF8(s)
}

// CheckClientName validates a name a client gives a producer, a
// subscription or a consumer (what says which, for the error): valid
// UTF-8, 1 to MaxClientName bytes, no control characters. Such names
// are keys in replicated state and appear in logs and metrics, never in
// paths.
func CheckClientName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: a %s name is empty", ErrInvalidName, what)
	case len(name) > MaxClientName:
		return fmt.Errorf("%w: %s name %s is longer than %d bytes", ErrInvalidName, what, quote(name), MaxClientName)
	}
	if err := checkUTF8(name); err != nil {
		return fmt.Errorf("%s name: %w", what, err)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s name %s has the control character %U", ErrInvalidName, what, quote(name), r)
		}
	}
	return nil
}

// ParseStream parses a stream name: persistent://TENANT/FABRIC/STREAM,
// TENANT/FABRIC/STREAM (the scheme is implied) or STREAM alone (a stream
// of DefaultTenant/DefaultFabric). String gives the full form back. A
// name that names a partition (ends in -partition-K) is refused: use
// ParsePartition.
func ParseStream(s string) (Stream, error) {
	parts, err := splitName(s)
	if err != nil {
		return Stream{}, err
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

// splitName splits a stream or partition name in any of its three forms
// into tenant, fabric and the rest, unchecked.
func splitName(s string) ([]string, error) {
	if err := checkName(s); err != nil {
		return nil, err
	}
	rest, full := strings.CutPrefix(s, Scheme)
	if !full && strings.Contains(s, "://") {
		return nil, nameError(s, "every fabriq stream is "+Scheme+"TENANT/FABRIC/STREAM (or TENANT/FABRIC/STREAM, or a short STREAM name)")
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 3:
		return parts, nil
	case len(parts) == 1 && !full:
		return []string{DefaultTenant, DefaultFabric, s}, nil
	}
	return nil, nameError(s, "a stream name is "+Scheme+"TENANT/FABRIC/STREAM, TENANT/FABRIC/STREAM or a short STREAM name")
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

// ParsePartition parses a partition name: a stream name in any of
// ParseStream's forms, or one followed by -partition-K.
func ParsePartition(s string) (Partition, error) {
	parts, err := splitName(s)
	if err != nil {
		return Partition{}, err
	}
	base, k, ok := splitPartition(parts[2])
	if !ok {
		st, err := ParseStream(s)
		if err != nil {
			return Partition{}, err
		}
		return Partition{Stream: st, Index: -1}, nil
	}
	st, err := ParseStream(Scheme + parts[0] + "/" + parts[1] + "/" + base)
	if err != nil {
		return Partition{}, err
	}
	if k >= MaxPartitions {
		return Partition{}, nameError(s, fmt.Sprintf("partition index %d is not below %d", k, MaxPartitions))
	}
	return Partition{Stream: st, Index: k}, nil
}

// ParseFabric parses TENANT/FABRIC, with or without the scheme.
func ParseFabric(s string) (tenant, fabric string, err error) {
	if err := checkName(s); err != nil {
		return "", "", err
	}
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

// ParseTenant checks a tenant's name.
func ParseTenant(s string) (string, error) {
	if err := checkName(s); err != nil {
		return "", err
	}
	return s, checkSegment(s, "tenant", s)
}

// CheckRegion checks a region's label: the characters of a name segment.
func CheckRegion(s string) error {
	if err := checkName(s); err != nil {
		return err
	}
	return checkSegment(s, "region", s)
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
