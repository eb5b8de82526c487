package wan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fabriq-io/fabriq/tests/chaos"
)

// WAN is a set of hosts, each a network namespace holding one node, in
// regions. Packets between hosts of different regions arrive Delay after
// they left; within a region they are passed on at once.
type WAN struct {
	// Delay is the one-way delay between regions.
	Delay time.Duration

	prefix  string
	subnet  string // first three octets
	regions []string
	tuns    []*os.File

	links   map[[2]int]chan packet
	done    chan struct{}
	wg      sync.WaitGroup
	dropped atomic.Int64
}

// packet is one IP packet on its way between two hosts.
type packet struct {
	data []byte
	due  time.Time
}

// prefix names this process's namespaces; leftovers of dead runs are
// recognised by it.
const prefix = "fqw"

// linkQueue bounds the packets in flight on one link (one way between
// two hosts); more are dropped, as a full router queue drops them.
const linkQueue = 16384

// mtu is the devices' MTU: large, so that a TCP segment of a big frame
// is one packet to move, not dozens.
const mtu = 65000

// New creates one host per entry of regions (host i is in regions[i]),
// with the one-way delay between regions. It removes the leftovers of
// earlier runs whose process is gone. It needs root, iproute2 and
// /dev/net/tun.
func New(regions []string, delay time.Duration) (*WAN, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("wan: network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("wan: network namespaces need iproute2: %w", err)
	}
	if len(regions) == 0 || len(regions) > 250 {
		return nil, fmt.Errorf("wan: 1 to 250 hosts, not %d", len(regions))
	}
	chaos.RemoveStale(prefix)
	pid := os.Getpid()
	w := &WAN{
		Delay:   delay,
		prefix:  fmt.Sprintf("%s%d", prefix, pid%10_000_000),
		subnet:  fmt.Sprintf("10.%d.%d", 150+pid%50, (pid/50)%250),
		regions: regions,
		links:   map[[2]int]chan packet{},
		done:    make(chan struct{}),
	}
	for i := range regions {
		if err := w.addHost(i); err != nil {
			w.Close()
			return nil, err
		}
	}
	for i := range regions {
		for j := range regions {
			if i != j {
				ch := make(chan packet, linkQueue)
				w.links[[2]int{i, j}] = ch
				w.wg.Add(1)
				go w.carry(ch, j)
			}
		}
	}
	for i := range regions {
		w.wg.Add(1)
		go w.route(i)
	}
	return w, nil
}

// addHost creates host i's namespace and its TUN device, the host's only
// way out.
func (w *WAN) addHost(i int) error {
	ns := w.ns(i)
	if err := chaos.IP("netns", "add", ns); err != nil {
		return err
	}
	if err := chaos.IP("-n", ns, "link", "set", "lo", "up"); err != nil {
		return err
	}
	tun, err := openTUN(ns, "wan0")
	if err != nil {
		return err
	}
	w.tuns = append(w.tuns, tun)
	for _, s := range [][]string{
		{"-n", ns, "addr", "add", w.IP(i) + "/24", "dev", "wan0"},
		{"-n", ns, "link", "set", "wan0", "mtu", strconv.Itoa(mtu), "up"},
	} {
		if err := chaos.IP(s...); err != nil {
			return err
		}
	}
	return nil
}

// openTUN creates a TUN device in a namespace: the thread enters the
// namespace, creates it, and comes back. A thread that cannot come back
// is never used again (its goroutine ends locked to it).
func openTUN(ns, name string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		f, restored, err := inNamespace(ns, func() (*os.File, error) {
			fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, fmt.Errorf("wan: /dev/net/tun: %w", err)
			}
			ifr, err := unix.NewIfreq(name)
			if err != nil {
				unix.Close(fd)
				return nil, err
			}
			ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
			if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
				unix.Close(fd)
				return nil, fmt.Errorf("wan: creating %s in %s: %w", name, ns, err)
			}
			// Non-blocking, so that the runtime's poller waits on it and
			// Close ends a pending Read.
			return os.NewFile(uintptr(fd), name), nil
		})
		if restored {
			runtime.UnlockOSThread()
		}
		res <- result{f, err}
	}()
	r := <-res
	return r.f, r.err
}

// inNamespace runs fn with the calling thread, which must be locked, in
// namespace ns, and puts it back; restored says it is back.
func inNamespace[T any](ns string, fn func() (T, error)) (v T, restored bool, err error) {
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return v, true, err
	}
	defer self.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return v, true, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return v, true, fmt.Errorf("wan: entering %s: %w", ns, err)
	}
	v, err = fn()
	if serr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); serr != nil {
		return v, false, errors.Join(err, fmt.Errorf("wan: leaving %s: %w", ns, serr))
	}
	return v, true, err
}

// route reads the packets host i sends and queues each on its link.
func (w *WAN) route(i int) {
	defer w.wg.Done()
	buf := make([]byte, mtu+1024)
	for {
		n, err := w.tuns[i].Read(buf)
		if err != nil {
			return
		}
		j, ok := w.host(buf[:n])
		if !ok || j == i {
			w.dropped.Add(1)
			continue
		}
		p := packet{data: append([]byte(nil), buf[:n]...), due: time.Now()}
		if w.regions[i] != w.regions[j] {
			p.due = p.due.Add(w.Delay)
		}
		select {
		case w.links[[2]int{i, j}] <- p:
		default:
			w.dropped.Add(1)
		}
	}
}

// host returns the host an IPv4 packet is addressed to.
func (w *WAN) host(pkt []byte) (int, bool) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return 0, false
	}
	dst := net.IP(pkt[16:20]).String()
	last := strings.LastIndexByte(dst, '.')
	if dst[:last] != w.subnet {
		return 0, false
	}
	n, err := strconv.Atoi(dst[last+1:])
	if err != nil || n < 1 || n > len(w.regions) {
		return 0, false
	}
	return n - 1, true
}

// carry passes one link's packets on to host j, each when it is due:
// every packet of a link waits the same delay, so they stay in order.
func (w *WAN) carry(ch <-chan packet, j int) {
	defer w.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var p packet
		select {
		case p = <-ch:
		case <-w.done:
			return
		}
		if d := time.Until(p.due); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-w.done:
				return
			}
		}
		if _, err := w.tuns[j].Write(p.data); err != nil {
			w.dropped.Add(1)
		}
	}
}

// Dropped returns how many packets were dropped: unroutable, or over a
// full link's queue.
func (w *WAN) Dropped() int64 { return w.dropped.Load() }

// Region returns host i's region.
func (w *WAN) Region(i int) string { return w.regions[i] }

// ns names host i's namespace.
func (w *WAN) ns(i int) string { return fmt.Sprintf("%sn%d", w.prefix, i) }

// IP is host i's address.
func (w *WAN) IP(i int) string { return fmt.Sprintf("%s.%d", w.subnet, i+1) }

// Command runs a program on host i: in its network namespace only
// (nsenter), with the rest of this process's view of the machine.
func (w *WAN) Command(i int, bin string, args ...string) *exec.Cmd {
	if path, err := exec.LookPath("nsenter"); err == nil {
		return exec.Command(path, append([]string{"--net=/var/run/netns/" + w.ns(i), "--", bin}, args...)...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", w.ns(i), bin}, args...)...)
}

// Dialer returns a dial function whose connections start on host i: a
// client using it is in host i's region.
func (w *WAN) Dialer(i int) func(ctx context.Context, addr string) (net.Conn, error) {
	ns := w.ns(i)
	return func(ctx context.Context, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		res := make(chan result, 1)
		go func() {
			// The socket belongs to the namespace the thread is in when
			// it is created; it stays there after the thread leaves.
			runtime.LockOSThread()
			c, restored, err := inNamespace(ns, func() (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", addr)
			})
			if restored {
				runtime.UnlockOSThread()
			}
			res <- result{c, err}
		}()
		r := <-res
		return r.c, r.err
	}
}

// Close stops routing and deletes the namespaces (their devices go with
// them).
func (w *WAN) Close() {
	select {
	case <-w.done:
		return
	default:
	}
	close(w.done)
	for _, t := range w.tuns {
		t.Close()
	}
	w.wg.Wait()
	for i := range w.regions {
		chaos.IP("netns", "del", w.ns(i))
	}
}
