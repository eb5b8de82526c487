package geofabric

import (
	"errors"
	"testing"
)

func TestParseStream(t *testing.T) {
	good := []struct {
		in   string
		want Stream
	}{
		{"persistent://acme/prod/orders", Stream{"acme", "prod", "orders"}},
		{"persistent://a-b/c_d/e.f=g:h", Stream{"a-b", "c_d", "e.f=g:h"}},
		{"persistent://t/f/partition-3", Stream{"t", "f", "partition-3"}},
		{"persistent://t/f/s-partition-x", Stream{"t", "f", "s-partition-x"}},
		{"persistent://t/f/s-partition-01", Stream{"t", "f", "s-partition-01"}},
	}
	for _, tt := range good {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseStream(tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("ParseStream(%q) = %+v, %v", tt.in, got, err)
			}
			if got.String() != tt.in {
				t.Fatalf("String() = %q", got.String())
			}
		})
	}
	bad := []string{
		"", "acme/prod/orders", "non-persistent://a/b/c", "persistent://a/b", "persistent://a/b/c/d",
		"persistent:///b/c", "persistent://a//c", "persistent://a/b/", "persistent://a/b/c d",
		"persistent://a/b/ü", "persistent://a/b/s-partition-0", "persistent://a/b/s-partition-12",
	}
	for _, in := range bad {
		t.Run("bad "+in, func(t *testing.T) {
			if _, err := ParseStream(in); !errors.Is(err, ErrInvalidName) {
				t.Fatalf("ParseStream(%q) err = %v, want ErrInvalidName", in, err)
			}
		})
	}
}

// MSG-2: a stream S with N partitions has partitions S-partition-0 … N-1.
func TestPartitionNames(t *testing.T) {
	s := Stream{"t", "f", "s"}
	if got := s.Partition(0, 1).String(); got != "persistent://t/f/s" {
		t.Fatalf("unpartitioned stream's partition is %q", got)
	}
	parts := s.Partitions(3)
	for i, p := range parts {
		want := "persistent://t/f/s-partition-" + string(rune('0'+i))
		if p.String() != want {
			t.Fatalf("partition %d is %q, want %q", i, p.String(), want)
		}
		back, err := ParsePartition(p.String())
		if err != nil || back != p {
			t.Fatalf("ParsePartition(%q) = %+v, %v", p.String(), back, err)
		}
	}
	p, err := ParsePartition("persistent://t/f/s")
	if err != nil || p.Index != -1 || p.Number() != 0 {
		t.Fatalf("unpartitioned: %+v %v", p, err)
	}
	for _, in := range []string{"persistent://t/f/s-partition-1024", "persistent://t//s-partition-1", "x"} {
		if _, err := ParsePartition(in); err == nil {
			t.Errorf("ParsePartition(%q) accepted", in)
		}
	}
}

func TestParseFabric(t *testing.T) {
	for _, in := range []string{"acme/prod", "persistent://acme/prod", "acme/prod/"} {
		tn, f, err := ParseFabric(in)
		if err != nil || tn != "acme" || f != "prod" {
			t.Fatalf("ParseFabric(%q) = %q %q %v", in, tn, f, err)
		}
	}
	for _, in := range []string{"acme", "a/b/c", "/b", "a/ b"} {
		if _, _, err := ParseFabric(in); err == nil {
			t.Errorf("ParseFabric(%q) accepted", in)
		}
	}
}

func TestValidatePartitions(t *testing.T) {
	for _, n := range []int{0, -1, MaxPartitions + 1} {
		if ValidatePartitions(n) == nil {
			t.Errorf("%d partitions accepted", n)
		}
	}
	if ValidatePartitions(1) != nil || ValidatePartitions(MaxPartitions) != nil {
		t.Fatal("valid counts refused")
	}
}
