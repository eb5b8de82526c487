package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Net puts each node in a network namespace of its own, joined by veth
// pairs to a bridge in the test's namespace, where the clients run.
// Network faults are routes and queueing disciplines inside the nodes'
// namespaces: a partition blackholes the other side's addresses (the
// clients still reach every node), netem adds latency and loss. Cutting a
// node off from the clients also takes a route in the test's namespace
// (CutClient). It needs root and iproute2.
type Net struct {
	prefix string
	bridge string
	subnet string // first three octets
	n      int

	// HasNetem says the kernel can add latency and loss (sch_netem).
	HasNetem bool
	// HasTBF says the kernel can shape a link with a token bucket
	// (sch_tbf): a slow link queues (latency) and drops (loss) what
	// exceeds its rate, where netem is missing.
	HasTBF bool

	mu      sync.Mutex
	routes  map[[2]int]bool // blackholed: from node, to node
	clients map[int]bool    // nodes cut off from the clients: true once both routes are in
	netem   map[int]bool
}

// netPrefix names this process's namespaces and links; leftovers of dead
// runs are recognised by it.
const netPrefix = "fqc"

// NewNet creates the bridge and n namespaces. It removes the leftovers of
// earlier runs whose process is gone.
func NewNet(n int) (*Net, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("network namespaces need iproute2: %w", err)
	}
	cleanStale()
	pid := os.Getpid()
	nt := &Net{
		prefix:  fmt.Sprintf("%s%d", netPrefix, pid%10_000_000),
		subnet:  fmt.Sprintf("10.%d.%d", 200+pid%50, (pid/50)%250),
		n:       n,
		routes:  map[[2]int]bool{},
		clients: map[int]bool{},
		netem:   map[int]bool{},
	}
	nt.bridge = nt.prefix + "br"
	// A run killed during a CutClient fault leaves its route to a node in
	// the test's namespace, and a later run can draw the same subnet.
	for i := range n {
		IP("route", "del", "blackhole", nt.IP(i)+"/32")
	}
	steps := [][]string{
		{"link", "add", nt.bridge, "type", "bridge"},
		{"addr", "add", nt.subnet + ".254/24", "dev", nt.bridge},
		{"link", "set", nt.bridge, "up"},
	}
	for i := range n {
		ns, host, peer := nt.ns(i), fmt.Sprintf("%sh%d", nt.prefix, i), fmt.Sprintf("%sp%d", nt.prefix, i)
		steps = append(steps,
			[]string{"netns", "add", ns},
			[]string{"link", "add", host, "type", "veth", "peer", "name", peer},
			[]string{"link", "set", peer, "netns", ns},
			[]string{"link", "set", host, "master", nt.bridge},
			[]string{"link", "set", host, "up"},
			[]string{"netns", "exec", ns, "ip", "link", "set", "lo", "up"},
			[]string{"netns", "exec", ns, "ip", "link", "set", peer, "name", "eth0"},
			[]string{"netns", "exec", ns, "ip", "addr", "add", nt.IP(i) + "/24", "dev", "eth0"},
			[]string{"netns", "exec", ns, "ip", "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := IP(s...); err != nil {
			nt.Close()
			return nil, err
		}
	}
	// netem needs the kernel's sch_netem; without it there are no
	// latency and loss faults.
	if IP("netns", "exec", nt.ns(0), "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "1ms") == nil {
		nt.HasNetem = true
		IP("netns", "exec", nt.ns(0), "tc", "qdisc", "del", "dev", "eth0", "root")
	}
	if IP("netns", "exec", nt.ns(0), "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "1mbit", "burst", "32kbit", "latency", "50ms") == nil {
		nt.HasTBF = true
		IP("netns", "exec", nt.ns(0), "tc", "qdisc", "del", "dev", "eth0", "root")
	}
	return nt, nil
}

func (nt *Net) ns(i int) string { return fmt.Sprintf("%sn%d", nt.prefix, i) }

// IP is node i's address.
func (nt *Net) IP(i int) string { return fmt.Sprintf("%s.%d", nt.subnet, i+1) }

// ClientIP is the clients' address as the nodes see it: the bridge's, in
// the test's namespace.
func (nt *Net) ClientIP() string { return nt.subnet + ".254" }

// Command runs a program inside node i's network namespace, in place
// (the process's pid is the program's). It enters the network namespace
// only (nsenter): `ip netns exec` would also give the program a copy of
// the mount table, and a copy of a lazyfs mount keeps its FUSE connection
// alive after the test unmounts it. Without nsenter it falls back to `ip
// netns exec`.
func (nt *Net) Command(i int, bin string, args ...string) *exec.Cmd {
	if path, err := exec.LookPath("nsenter"); err == nil {
		return exec.Command(path, append([]string{"--net=/var/run/netns/" + nt.ns(i), "--", bin}, args...)...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", nt.ns(i), bin}, args...)...)
}

// Partition cuts every node of one group off from every node of the
// others (both ways).
func (nt *Net) Partition(groups [][]int) error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	for gi, g := range groups {
		for gj, h := range groups {
			if gi == gj {
				continue
			}
			for _, a := range g {
				for _, b := range h {
					if nt.routes[[2]int{a, b}] {
						continue
					}
					if err := IP("netns", "exec", nt.ns(a), "ip", "route", "add", "blackhole", nt.IP(b)+"/32"); err != nil {
						return err
					}
					nt.routes[[2]int{a, b}] = true
				}
			}
		}
	}
	return nil
}

// Cut blackholes traffic from node a to node b only (one way).
func (nt *Net) Cut(a, b int) error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	if nt.routes[[2]int{a, b}] {
		return nil
	}
	if err := IP("netns", "exec", nt.ns(a), "ip", "route", "add", "blackhole", nt.IP(b)+"/32"); err != nil {
		return err
	}
	nt.routes[[2]int{a, b}] = true
	return nil
}

// CutClient cuts node i off from the clients, both ways, until Heal; it
// still talks to the other nodes. A blackhole route for the clients'
// address inside the node's namespace drops what the node sends them
// (handshake answers included); one for the node's address in the test's
// namespace drops what they send it: without it, where reverse-path
// filtering is off (the kernel's default), their requests would still
// reach the node and be carried out unanswered. Neither route is on the
// nodes' way to each other (the bridge switches their frames; the test's
// namespace does not route them). A client with every node's address,
// such as the test's admin client, goes on through the others: a dial
// to the node fails at once, a request already on a connection to it
// waits for its timeout.
func (nt *Net) CutClient(i int) error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	if nt.clients[i] {
		return nil
	}
	if err := IP("netns", "exec", nt.ns(i), "ip", "route", "add", "blackhole", nt.ClientIP()+"/32"); err != nil {
		return err
	}
	nt.clients[i] = false
	if err := IP("route", "add", "blackhole", nt.IP(i)+"/32"); err != nil {
		return err
	}
	nt.clients[i] = true
	return nil
}

// Netem gives node i's link latency and loss, e.g. "delay", "50ms",
// "20ms", "loss", "3%".
func (nt *Net) Netem(i int, args ...string) error {
	return nt.shape(i, "netem", args...)
}

// SlowLink limits node i's outgoing link to rate (e.g. "1mbit"), queueing
// up to latency (e.g. "80ms") and dropping what overflows.
func (nt *Net) SlowLink(i int, rate, latency string) error {
	return nt.shape(i, "tbf", "rate", rate, "burst", "32kbit", "latency", latency)
}

// shape sets node i's root queueing discipline.
func (nt *Net) shape(i int, qdisc string, args ...string) error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	if err := IP(append([]string{"netns", "exec", nt.ns(i), "tc", "qdisc", "replace", "dev", "eth0", "root", qdisc}, args...)...); err != nil {
		return err
	}
	nt.netem[i] = true
	return nil
}

// Heal removes every partition and queueing discipline.
func (nt *Net) Heal() error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	var first error
	for r := range nt.routes {
		if err := IP("netns", "exec", nt.ns(r[0]), "ip", "route", "del", "blackhole", nt.IP(r[1])+"/32"); err != nil && first == nil {
			first = err
		}
		delete(nt.routes, r)
	}
	for i := range nt.netem {
		if err := IP("netns", "exec", nt.ns(i), "tc", "qdisc", "del", "dev", "eth0", "root"); err != nil && first == nil {
			first = err
		}
		delete(nt.netem, i)
	}
	for i, both := range nt.clients {
		if err := IP("netns", "exec", nt.ns(i), "ip", "route", "del", "blackhole", nt.ClientIP()+"/32"); err != nil && first == nil {
			first = err
		}
		if both {
			if err := IP("route", "del", "blackhole", nt.IP(i)+"/32"); err != nil && first == nil {
				first = err
			}
		}
		delete(nt.clients, i)
	}
	return first
}

// Close deletes the namespaces (their veths go with them), the bridge and
// the routes CutClient left in the test's namespace.
func (nt *Net) Close() {
	nt.mu.Lock()
	for i, both := range nt.clients {
		if both {
			IP("route", "del", "blackhole", nt.IP(i)+"/32")
		}
		delete(nt.clients, i)
	}
	nt.mu.Unlock()
	for i := range nt.n {
		IP("netns", "del", nt.ns(i))
	}
	IP("link", "del", nt.bridge)
}

// cleanStale removes namespaces and bridges of runs whose process is gone.
func cleanStale() { RemoveStale(netPrefix) }

// RemoveStale removes the network namespaces and links named prefix+PID...
// whose process is gone: what a run killed before its clean-up left.
func RemoveStale(prefix string) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	dead := func(name string) bool {
		digits, ok := strings.CutPrefix(name, prefix)
		end := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' })
		if !ok || end <= 0 {
			return false
		}
		pid, err := strconv.Atoi(digits[:end])
		if err != nil || pid == os.Getpid()%10_000_000 {
			return false
		}
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && dead(f[0]) {
			IP("netns", "del", f[0])
		}
	}
	for _, line := range strings.Split(string(links), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			if name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@"); dead(name) {
				IP("link", "del", name)
			}
		}
	}
}

// IP runs the ip command (iproute2), its output in the error.
func IP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
