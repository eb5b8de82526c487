package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A power loss keeps what a node synced and drops what it did not, and
// the disk is mounted again for the node's restart.
func TestDisksPowerLoss(t *testing.T) {
	n := &Node{ID: "n1", Dir: filepath.Join(t.TempDir(), "n1")}
	d, err := MountDisks(&Cluster{Nodes: []*Node{n}})
	if err != nil {
		t.Fatalf("lazyfs disks need root and /dev/fuse: %v", err)
	}
	defer d.Unmount()
	write := func(name, data string, sync bool) {
		f, err := os.Create(filepath.Join(n.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(data); err != nil {
			t.Fatal(err)
		}
		if sync {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("synced", "kept", true)
	write("unsynced", "lost", false)
	what, err := d.PowerLoss(n)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(what, "(4 bytes)") {
		t.Fatalf("power loss reports %q", what)
	}
	for name, want := range map[string]string{"synced": "kept", "unsynced": ""} {
		got, err := os.ReadFile(filepath.Join(n.Dir, name))
		if err != nil || string(got) != want {
			t.Fatalf("%s after the power loss: %q, %v; want %q", name, got, err, want)
		}
	}
	write("after", "again", true) // mounted again
	if err := d.Unmount(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(n.Dir+".disk", "after")); string(got) != "again" {
		t.Fatalf("the disk after the restart holds %q", got)
	}
}
