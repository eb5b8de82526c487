package broker

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabriq-io/fabriq/geofabric"
)

func TestPartitionDir(t *testing.T) {
	const data = "/srv/fabriq/data"
	good := []struct{ name, dir string }{
		{"persistent://acme/prod/orders", "acme/prod/orders"},
		{"persistent://acme/prod/orders-partition-3", "acme/prod/orders-partition-3"},
		{"persistent://a-b/c_d/e.f=g:h", "a-b/c_d/e.f=g:h"},
		{"persistent://.t/f./...", ".t/f./..."},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := PartitionDir(data, tt.name)
			if err != nil || dir != filepath.Join(data, "partitions", tt.dir) {
				t.Fatalf("PartitionDir(%q) = %q, %v; want %q", tt.name, dir, err, tt.dir)
			}
			p, err := partitionOfDir(data, dir)
			if err != nil || p.String() != tt.name {
				t.Fatalf("partitionOfDir(%q) = %v, %v", dir, p, err)
			}
		})
	}
	for _, name := range []string{
		"persistent://a/../..", "persistent://t/f/.", "persistent://../../..", "persistent://t/f/a\x00",
		"persistent://t/f/a/b", "persistent://t/f/\xff", "persistent://t/f/" + strings.Repeat("x", 10000), "",
	} {
		if dir, err := PartitionDir(data, name); !errors.Is(err, geofabric.ErrInvalidName) {
			t.Errorf("PartitionDir(%.40q) = %q, %v; want ErrInvalidName", name, dir, err)
		}
	}
}

// Whatever reaches the path below validation, the guard keeps it a
// directory of its own three levels below DATA_DIR/partitions.
func TestPartitionPathEscapes(t *testing.T) {
	const data = "/srv/fabriq/data"
	tests := []struct {
		tenant, fabric, leaf string
		want                 string // "" for an error
	}{
		{"t", "f", "s", "t/f/s"},
		{"..", "..", "..", "%2E%2E/%2E%2E/%2E%2E"},
		{"a", "..", "..", "a/%2E%2E/%2E%2E"},
		{"t", "f", ".", "t/f/%2E"},
		{"t", "f", "a/b", "t/f/a%2Fb"},
		{"t", "f", "../../../etc", "t/f/..%2F..%2F..%2Fetc"},
		{"t", "f", "s@n1", "t/f/s%40n1"},
		{"t", "f", "100%", "t/f/100%25"},
		{"t", "f", "%2E%2E", "t/f/%252E%252E"},
		{"t", "f", "a\x00b", "t/f/a%00b"},
		{"t", "f", "ü", "t/f/%C3%BC"},
		{"t", "f", "\xff", "t/f/%FF"},
		{"t", "f", "*?[", "t/f/%2A%3F%5B"},
		{"", "f", "s", ""},
		{"t", "", "s", ""},
		{"t", "f", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.tenant+"|"+tt.fabric+"|"+tt.leaf, func(t *testing.T) {
			dir, err := partitionPath(data, tt.tenant, tt.fabric, tt.leaf)
			if tt.want == "" {
				if !errors.Is(err, ErrPartitionPath) {
					t.Fatalf("partitionPath = %q, %v; want ErrPartitionPath", dir, err)
				}
				return
			}
			if err != nil || dir != filepath.Join(data, "partitions", tt.want) {
				t.Fatalf("partitionPath = %q, %v; want %q", dir, err, tt.want)
			}
			for i, e := range strings.Split(tt.want, "/") {
				back, err := unescapeElement(e)
				if err != nil || back != []string{tt.tenant, tt.fabric, tt.leaf}[i] {
					t.Fatalf("unescapeElement(%q) = %q, %v", e, back, err)
				}
			}
		})
	}
}

func TestCheckCopyDir(t *testing.T) {
	const root = "/d/partitions"
	for _, p := range []string{"/d/partitions/t/f/s", "/d/partitions/t/f/s@n1", "/d/partitions/t/f/s@new"} {
		if err := checkCopyDir(root, p); err != nil {
			t.Errorf("checkCopyDir(%q): %v", p, err)
		}
	}
	for _, p := range []string{
		"/d", "/d/partitions", "/d/partitions/t", "/d/partitions/t/f", "/d/partitions/t/f/s/log",
		"/d/partitions/t/f/../../..", "/d/partitions/a/../..", "/d/partitions/t/f/.", "/d/partitions/t//f/s",
		"/tmp", "/", "", "t/f/s", "/d/partitions/../partitions/t/f/s", "/d/partitions/t/f/s/",
	} {
		if err := checkCopyDir(root, p); !errors.Is(err, ErrPartitionPath) {
			t.Errorf("checkCopyDir(%q) = %v, want ErrPartitionPath", p, err)
		}
		if err := removeCopy("/d", p); !errors.Is(err, ErrPartitionPath) {
			t.Errorf("removeCopy(%q) = %v, want ErrPartitionPath", p, err)
		}
	}
	// A directory escapeElement would not have made is no partition's.
	for _, p := range []string{"/d/partitions/t/f/%2e", "/d/partitions/t/f/%2", "/d/partitions/t/f/a%40b", "/d/partitions/t/%66/s"} {
		if pn, err := partitionOfDir("/d", p); err == nil {
			t.Errorf("partitionOfDir(%q) = %v", p, pn)
		}
	}
}

// checkUnder fails unless dir is a directory of its own three levels below
// data/partitions, without an '@'.
func checkUnder(t *testing.T, data, dir string) {
	t.Helper()
	root := filepath.Join(data, "partitions")
	rel, err := filepath.Rel(root, dir)
	if err != nil || !filepath.IsLocal(rel) || !strings.HasPrefix(dir, root+string(filepath.Separator)) {
		t.Fatalf("%q is not below %q", dir, root)
	}
	if elems := strings.Split(rel, string(filepath.Separator)); len(elems) != 3 {
		t.Fatalf("%q is %d levels below %q", dir, len(elems), root)
	}
	if strings.Contains(rel, "@") {
		t.Fatalf("%q holds an @", dir)
	}
}

// FuzzPartitionDir: for any string accepted as a partition name, its
// directory is a directory of its own under DATA_DIR/partitions, and the
// directory names the partition back; and for any three path elements at
// all (what a validation bug would let through), the path is under
// DATA_DIR/partitions or refused, and reversible.
func FuzzPartitionDir(f *testing.F) {
	for _, s := range []string{
		"persistent://a/b/c", "persistent://a/../..", "persistent://t/f/.", "persistent://../../..",
		"persistent://t/f/s-partition-7", "persistent://t/f/a\x00b", "persistent://t/f/\xff", "..", ".", "",
		"a/b", "@", "%", "%2E", "s@new", "persistent://t/f/...", "/abs", `..\..`,
	} {
		f.Add(s, s, s, s)
	}
	f.Add("persistent://t/f/s", "..", "..", "..")
	f.Add("persistent://t/f/s", "a", "..", "..")
	f.Fuzz(func(t *testing.T, name, tenant, fabric, leaf string) {
		const data = "/srv/fabriq/data"
		if dir, err := PartitionDir(data, name); err == nil {
			checkUnder(t, data, dir)
			p, err := partitionOfDir(data, dir)
			if err != nil || p.String() != name {
				t.Fatalf("partitionOfDir(%q) = %v, %v; want %q", dir, p, err, name)
			}
		} else if _, perr := geofabric.ParsePartition(name); perr == nil {
			t.Fatalf("valid name %q has no directory: %v", name, err)
		}
		dir, err := partitionPath(data, tenant, fabric, leaf)
		if err != nil {
			if tenant != "" && fabric != "" && leaf != "" {
				t.Fatalf("partitionPath(%q, %q, %q): %v", tenant, fabric, leaf, err)
			}
			return
		}
		checkUnder(t, data, dir)
		root := filepath.Join(data, "partitions")
		for i, e := range strings.Split(dir[len(root)+1:], string(filepath.Separator)) {
			back, err := unescapeElement(e)
			if err != nil || back != []string{tenant, fabric, leaf}[i] {
				t.Fatalf("element %q of %q unescapes to %q, %v", e, dir, back, err)
			}
		}
	})
}
