package geofabric

import (
	"errors"
	"strings"
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
		"", "acme/prod", "a/b/c/d", "/orders", "orders/", "non-persistent://a/b/c", "persistent://orders", "http://orders", "persistent://a/b", "persistent://a/b/c/d",
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

// A short name is a stream of public/default, a name without the scheme
// has it implied, and both come back in full form.
func TestShortNames(t *testing.T) {
	for in, want := range map[string]string{
		"orders":                "persistent://public/default/orders",
		"acme/prod/orders":      "persistent://acme/prod/orders",
		"public/default/orders": "persistent://public/default/orders",
		"orders-partition-x":    "persistent://public/default/orders-partition-x",
	} {
		st, err := ParseStream(in)
		if err != nil || st.String() != want {
			t.Errorf("ParseStream(%q) = %q, %v; want %q", in, st.String(), err, want)
		}
	}
	for in, want := range map[string]string{
		"orders":                       "persistent://public/default/orders",
		"orders-partition-3":           "persistent://public/default/orders-partition-3",
		"acme/prod/orders-partition-0": "persistent://acme/prod/orders-partition-0",
	} {
		p, err := ParsePartition(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePartition(%q) = %q, %v; want %q", in, p.String(), err, want)
		}
	}
	if _, err := ParseStream("orders-partition-3"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("a short partition name is not a stream: %v", err)
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
	for _, in := range []string{"persistent://t/f/s-partition-1024", "persistent://t//s-partition-1", "x/y", "persistent://x"} {
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

// Names refuse what a file system or a URL reads specially, and bytes that
// are not UTF-8, with an error that says why and does not repeat a huge
// name.
func TestNamesRefused(t *testing.T) {
	long := "persistent://t/f/" + strings.Repeat("s", 10000)
	tests := []struct {
		in, why string
	}{
		{"persistent://a/../..", `tenant/fabric/stream: fabric may not be ".."`},
		{"persistent://t/f/.", `stream may not be "."`},
		{"persistent://../../..", `tenant may not be ".."`},
		{"persistent://./f/s", `tenant may not be "."`},
		{"persistent://t/f/..-partition-0", ""}, // a partition of ".." (ParseStream: a partition name)
		{"persistent://t/f/a/b", "TENANT/FABRIC/STREAM"},
		{"persistent://t/f/a\x00b", `character '\x00'`},
		{"persistent://t/f/a\xffb", "not valid UTF-8 (byte 0xff at 18)"},
		{"persistent://t/\xc3/s", "not valid UTF-8 (byte 0xc3 at 15)"},
		{"persistent://t/f/\xed\xa0\x80", "not valid UTF-8"}, // a UTF-16 surrogate
		{"persistent://t/f/a b", `character ' '`},
		{"persistent://t/f/a%2Fb", `character '%'`},
		{"persistent://t/f/a@b", `character '@'`},
		{long, "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.in[:min(len(tt.in), 40)], func(t *testing.T) {
			for _, parse := range []func(string) error{
				func(s string) error { _, err := ParseStream(s); return err },
				func(s string) error { _, err := ParsePartition(s); return err },
			} {
				err := parse(tt.in)
				if !errors.Is(err, ErrInvalidName) {
					t.Fatalf("%q: err = %v, want ErrInvalidName", tt.in, err)
				}
				why := strings.TrimPrefix(tt.why, "tenant/fabric/stream: ")
				if !strings.Contains(err.Error(), why) {
					t.Fatalf("%q: err = %q, want it to say %q", tt.in, err, why)
				}
				if len(err.Error()) > 200 {
					t.Fatalf("error of %d bytes: %.100s…", len(err.Error()), err)
				}
			}
		})
	}
	for _, in := range []string{"../..", "t/.", "./f", "t/f\xff", "persistent://../x"} {
		if _, _, err := ParseFabric(in); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ParseFabric(%q) err = %v, want ErrInvalidName", in, err)
		}
	}
	// Dots are fine elsewhere in a segment.
	for _, in := range []string{"persistent://t/f/...", "persistent://t/f/.s", "persistent://t.x/f./s..s"} {
		if _, err := ParseStream(in); err != nil {
			t.Errorf("ParseStream(%q): %v", in, err)
		}
	}
	// The longest names the segments allow still parse.
	seg := strings.Repeat("x", maxSegment)
	longest := Stream{seg, seg, seg}.Partition(MaxPartitions-1, MaxPartitions).String()
	if len(longest) != MaxName {
		t.Fatalf("the longest partition name has %d bytes, MaxName is %d", len(longest), MaxName)
	}
	if _, err := ParsePartition(longest); err != nil {
		t.Fatal(err)
	}
}

func TestCheckClientName(t *testing.T) {
	good := []string{"p", "orders-writer-1", "sub/with/slashes", "..", "名前", "emoji-\U0001F600", strings.Repeat("x", MaxClientName), "\uFFFD"}
	for _, name := range good {
		if err := CheckClientName("producer", name); err != nil {
			t.Errorf("CheckClientName(%q): %v", name, err)
		}
	}
	bad := []struct {
		in, why string
	}{
		{"", "a subscription name is empty"},
		{strings.Repeat("x", MaxClientName+1), "longer than 256 bytes"},
		{strings.Repeat("x", 10000), "(10000 bytes)"},
		{"a\x00b", "control character U+0000"},
		{"a\nb", "control character U+000A"},
		{"a\x7fb", "control character U+007F"},
		{"a\u0085b", "control character U+0085"},
		{"a\xffb", "subscription name: invalid name \"a\\xffb\": is not valid UTF-8 (byte 0xff at 1)"},
		{"\xc0\xaf", "not valid UTF-8"}, // an overlong '/'
	}
	for _, tt := range bad {
		t.Run(tt.in[:min(len(tt.in), 20)], func(t *testing.T) {
			err := CheckClientName("subscription", tt.in)
			if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), tt.why) {
				t.Fatalf("CheckClientName(%q) = %v, want ErrInvalidName saying %q", tt.in, err, tt.why)
			}
			if len(err.Error()) > 200 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
		})
	}
}

func TestParseTenantAndRegion(t *testing.T) {
	if got, err := ParseTenant("acme"); err != nil || got != "acme" {
		t.Fatalf("ParseTenant(acme) = %q, %v", got, err)
	}
	for _, in := range []string{"", "a/b", "..", "a b"} {
		if _, err := ParseTenant(in); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ParseTenant(%q) = %v, want ErrInvalidName", in, err)
		}
		if err := CheckRegion(in); !errors.Is(err, ErrInvalidName) {
			t.Errorf("CheckRegion(%q) = %v, want ErrInvalidName", in, err)
		}
	}
	if err := CheckRegion("eu-west-1"); err != nil {
		t.Fatal(err)
	}
}
