package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/fabriq-io/fabriq/geofabric"
)

// A partition's data lives in DATA_DIR/partitions/TENANT/FABRIC/LEAF, LEAF
// being the stream's name or NAME-partition-K. Each of the three elements
// is its name segment escaped (escapeElement), and the path is checked by
// one guard (checkCopyDir) before it is used: even a name that validation
// let through by mistake cannot lead outside DATA_DIR/partitions, nor name
// a copy set aside (DIR@MEMBER, see claimPartitionDir). Every removal of a
// partition directory goes through the same guard (removeCopy).

// dataLockFile is the file a node flocks in its data directory while it
// runs (lockDataDir).
const dataLockFile = "LOCK"

// ErrDataDirInUse is matched (errors.Is) by Start's error when another
// process holds the data directory.
var ErrDataDirInUse = errors.New("broker: the data directory is in use by another process")

// lockDataDir holds dataDir for this process: one flock for the whole
// directory, so that a second node started on it by mistake stops at once
// with a clear error, before it opens anything. Within the process,
// storage keeps a partition's log from being opened twice. (Each
// partition's log once flocked a file of its own: a thousand more open
// files on a node of a thousand partitions, which a killed process
// releases before the last of its sockets close.)
func lockDataDir(dataDir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dataDir, dataLockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrDataDirInUse, dataDir)
		}
		return nil, fmt.Errorf("broker: lock the data directory %s: %w", dataDir, err)
	}
	return f, nil
}

// unlockDataDir releases what lockDataDir held; it may be called again.
func (n *Node) unlockDataDir() {
	n.mu.Lock()
	f := n.dataLock
	n.dataLock = nil
	n.mu.Unlock()
	if f != nil {
		f.Close()
	}
}

// partitionsDir is the directory under the data directory that holds every
// partition's data.
const partitionsDir = "partitions"

// ErrPartitionPath is matched (errors.Is) by the error for a partition
// directory that would not be a directory of its own three levels below
// DATA_DIR/partitions.
var ErrPartitionPath = errors.New("broker: partition directory outside the partitions directory")

// PartitionDir returns the directory of a partition's data under dataDir,
// or an error for a name geofabric refuses or a path the guard refuses.
func PartitionDir(dataDir, partition string) (string, error) {
	p, err := geofabric.ParsePartition(partition)
	if err != nil {
		return "", err
	}
	leaf := p.Stream.Name
	if p.Index >= 0 {
		leaf = fmt.Sprintf("%s-partition-%d", p.Stream.Name, p.Index)
	}
	return partitionPath(dataDir, p.Stream.Tenant, p.Stream.Fabric, leaf)
}

// partitionPath escapes tenant, fabric and leaf into a path below
// dataDir/partitions and checks it.
func partitionPath(dataDir, tenant, fabric, leaf string) (string, error) {
	root := filepath.Join(dataDir, partitionsDir)
	dir := filepath.Join(root, escapeElement(tenant), escapeElement(fabric), escapeElement(leaf))
	if err := checkCopyDir(root, dir); err != nil {
		return "", err
	}
	if rel := dir[len(root):]; strings.Contains(rel, "@") {
		return "", fmt.Errorf("%w: %s has an @, which marks a copy set aside", ErrPartitionPath, dir)
	}
	return dir, nil
}

// checkCopyDir is the guard of partition directories: path must be
// root/TENANT/FABRIC/LEAF, three elements below root, clean and local
// (filepath.IsLocal: no "..", not absolute, no empty element).
func checkCopyDir(root, path string) error {
	rel, err := filepath.Rel(root, path)
	if err != nil || !filepath.IsLocal(rel) || filepath.Join(root, rel) != path {
		return fmt.Errorf("%w: %s is not below %s", ErrPartitionPath, path, root)
	}
	elems := strings.Split(rel, string(filepath.Separator))
	if len(elems) != 3 || slices.ContainsFunc(elems, func(e string) bool { return e == "" || e == "." || e == ".." }) {
		return fmt.Errorf("%w: %s is not a directory three levels below %s", ErrPartitionPath, path, root)
	}
	return nil
}

// partitionOfDir returns the partition whose data directory is dir (a
// directory three levels below DATA_DIR/partitions), refusing a directory
// PartitionDir would not have made for it.
func partitionOfDir(dataDir, dir string) (geofabric.Partition, error) {
	root := filepath.Join(dataDir, partitionsDir)
	if err := checkCopyDir(root, dir); err != nil {
		return geofabric.Partition{}, err
	}
	elems := strings.Split(dir[len(root)+1:], string(filepath.Separator))
	for i, e := range elems {
		s, err := unescapeElement(e)
		if err != nil {
			return geofabric.Partition{}, fmt.Errorf("%w: %s: %v", ErrPartitionPath, dir, err)
		}
		elems[i] = s
	}
	p, err := geofabric.ParsePartition(geofabric.Scheme + strings.Join(elems, "/"))
	if err != nil {
		return geofabric.Partition{}, err
	}
	if want, err := PartitionDir(dataDir, p.String()); err != nil || want != dir {
		return geofabric.Partition{}, fmt.Errorf("%w: %s is not the directory of %s", ErrPartitionPath, dir, p)
	}
	return p, nil
}

// removeCopy removes a partition directory (a partition's, or a copy set
// aside) once the guard has checked it.
func removeCopy(dataDir, dir string) error {
	if err := checkCopyDir(filepath.Join(dataDir, partitionsDir), dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// safeByte reports a byte a path element keeps as it is: the bytes valid
// name segments are made of.
func safeByte(b byte) bool {
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return true
	}
	return b == '-' || b == '_' || b == '.' || b == '=' || b == ':'
}

// escapeElement makes a name segment a path element: every byte outside
// [A-Za-z0-9-_.=:] becomes %XX ('%', '/', '@', NUL and the bytes of any
// non-ASCII character among them), and so does every dot of "." and "..".
// For every segment geofabric accepts the element is the segment itself,
// so directories made before escaping existed keep their names. The
// escaping is reversible (unescapeElement) and never yields "", "." or
// "..", nor a '/' or an '@'.
func escapeElement(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !safeByte(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safeByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0x0f])
	}
	return b.String()
}

// unescapeElement reverses escapeElement.
func unescapeElement(e string) (string, error) {
	if !strings.Contains(e, "%") {
		return e, nil
	}
	var b strings.Builder
	for i := 0; i < len(e); i++ {
		if e[i] != '%' {
			b.WriteByte(e[i])
			continue
		}
		if i+2 >= len(e) {
			return "", fmt.Errorf("element %q has a cut escape", e)
		}
		hi, lo := unhex(e[i+1]), unhex(e[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("element %q has a bad escape", e)
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
