package chaos

import (
	"fmt"
	"os"
	"sync"

	"github.com/fabriq-io/fabriq/tests/lazyfs"
)

// Disks puts each node's data directory on a lazyfs mount (over DIR.disk),
// so that a power loss can drop what the node wrote and did not fsync.
type Disks struct {
	mu     sync.Mutex
	mounts map[string]*lazyfs.FS // data directory → its mount
}

// MountDisks mounts a lazyfs over DIR.disk at each node's DIR.
func MountDisks(c *Cluster) (*Disks, error) {
	d := &Disks{mounts: map[string]*lazyfs.FS{}}
	for _, n := range c.Nodes {
		if err := d.mount(n.Dir); err != nil {
			d.Unmount()
			return nil, err
		}
	}
	return d, nil
}

func (d *Disks) mount(dir string) error {
	for _, p := range []string{dir, dir + ".disk"} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
	}
	fsys, err := lazyfs.Mount(dir+".disk", dir)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.mounts[dir] = fsys
	d.mu.Unlock()
	return nil
}

// PowerLoss drops every write of a stopped node that it did not fsync,
// and mounts its disk again. It says how much was dropped.
func (d *Disks) PowerLoss(n *Node) (string, error) {
	d.mu.Lock()
	fsys := d.mounts[n.Dir]
	delete(d.mounts, n.Dir)
	d.mu.Unlock()
	if fsys == nil {
		return "", fmt.Errorf("chaos: %s has no lazyfs disk", n.ID)
	}
	if err := fsys.Crash(); err != nil {
		return "", err
	}
	dr := fsys.Dropped()
	if err := d.mount(n.Dir); err != nil {
		return "", err
	}
	return fmt.Sprintf("power loss dropped %d writes (%d bytes) and %d size changes in %d files", dr.Writes, dr.Bytes, dr.Truncates, dr.Files), nil
}

// SetFull makes a node's disk act as full, or stop doing so.
func (d *Disks) SetFull(n *Node, full bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	fsys := d.mounts[n.Dir]
	if fsys == nil {
		return fmt.Errorf("chaos: %s has no lazyfs disk", n.ID)
	}
	fsys.SetFull(full)
	return nil
}

// FreeAll makes every disk act as not full.
func (d *Disks) FreeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, fsys := range d.mounts {
		fsys.SetFull(false)
	}
}

// Unmount unmounts every disk, keeping what was written.
func (d *Disks) Unmount() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var first error
	for dir, fsys := range d.mounts {
		if err := fsys.Unmount(); err != nil && first == nil {
			first = err
		}
		delete(d.mounts, dir)
	}
	return first
}
