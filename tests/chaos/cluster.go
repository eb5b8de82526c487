package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Node is one fabriqd process of a chaos cluster. Its addresses are fixed
// so that it restarts where it was.
type Node struct {
	ID     string
	Dir    string
	Client string // client address
	args   []string
	log    string // its log file

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	ready  chan struct{}
	paused bool
}

// Cluster runs fabriqd processes, on loopback or each on a host of its
// own (Hosts).
type Cluster struct {
	Bin   string
	Nodes []*Node
	// Net, when set, holds the nodes' namespaces and injects network
	// faults.
	Net *Net

	hosts Hosts
}

// Hosts give each node a host of its own: an address, and a way to run
// a program there. Net is one; so are regions far apart (tests/wan).
type Hosts interface {
	// IP is host i's address.
	IP(i int) string
	// Command runs a program on host i.
	Command(i int, bin string, args ...string) *exec.Cmd
}

// Append adds flags to the node's command line, from its next start.
func (n *Node) Append(args ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.args = append(n.args, args...)
}

// usedPorts are the ports handed out in this process.
var (
	portMu    sync.Mutex
	usedPorts = map[int]bool{}
)

// freeAddr returns a loopback address whose port (TCP and UDP) was free,
// below the kernel's ephemeral range so no outgoing connection takes it
// while its node is down.
func freeAddr() (string, error) {
	portMu.Lock()
	defer portMu.Unlock()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		if usedPorts[port] {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err != nil {
			continue
		}
		pc.Close()
		usedPorts[port] = true
		return addr, nil
	}
	return "", fmt.Errorf("chaos: no free port")
}

// NewCluster prepares n nodes that bootstrap together, on hosts if they
// are not nil (a *Net also injects network faults), on loopback
// otherwise; extra flags go to every node. Logs go to logDir/ID.log.
func NewCluster(bin, dataDir, logDir string, n int, hosts Hosts, extra ...string) (*Cluster, error) {
	c := &Cluster{Bin: bin}
	if nt, ok := hosts.(*Net); ok {
		if nt == nil {
			hosts = nil
		}
		c.Net = nt
	}
	c.hosts = hosts
	addr := func(i, port int) (string, error) {
		if hosts != nil {
			return fmt.Sprintf("%s:%d", hosts.IP(i), port), nil
		}
		return freeAddr()
	}
	gossip := make([]string, n)
	for i := range gossip {
		var err error
		if gossip[i], err = addr(i, 7946); err != nil {
			return nil, err
		}
	}
	for i := range n {
		client, err := addr(i, 6650)
		if err != nil {
			return nil, err
		}
		raft, err := addr(i, 7650)
		if err != nil {
			return nil, err
		}
		http, err := addr(i, 8080)
		if err != nil {
			return nil, err
		}
		id := fmt.Sprint("n", i+1)
		nd := &Node{ID: id, Dir: filepath.Join(dataDir, id), Client: client, log: filepath.Join(logDir, id+".log")}
		nd.args = append([]string{
			"--node-id", id, "--data-dir", nd.Dir, "--client-addr", client, "--raft-addr", raft, "--http-addr", http,
			"--gossip-addr", gossip[i], "--bootstrap-expect", fmt.Sprint(n), "--join", gossip[(i+1)%n], "--log-json",
		}, extra...)
		c.Nodes = append(c.Nodes, nd)
	}
	return c, nil
}

// URL names every node.
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Client
	}
	return "fabriq://" + strings.Join(addrs, ",")
}

// Start launches a node that is not running.
func (c *Cluster) Start(n *Node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.Bin, n.args...)
	if c.hosts != nil {
		cmd = c.hosts.Command(c.index(n), c.Bin, n.args...)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited, ready := make(chan struct{}), make(chan struct{})
	n.cmd, n.exited, n.ready, n.paused = cmd, exited, ready, false
	go func() {
		// Owned by the process: it ends when the process's stderr closes.
		defer close(exited)
		defer logf.Close()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			var rec struct {
				Msg string `json:"msg"`
			}
			if !once && json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "fabriqd ready" {
				once = true
				close(ready)
			}
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
	}()
	return nil
}

// index returns a node's place in the cluster.
func (c *Cluster) index(n *Node) int {
	for i, o := range c.Nodes {
		if o == n {
			return i
		}
	}
	return -1
}

// WaitReady waits until a started node says it is ready.
func (c *Cluster) WaitReady(ctx context.Context, n *Node) error {
	n.mu.Lock()
	ready, exited := n.ready, n.exited
	n.mu.Unlock()
	if ready == nil {
		return fmt.Errorf("chaos: node %s is not running", n.ID)
	}
	select {
	case <-ready:
		return nil
	case <-exited:
		return fmt.Errorf("chaos: node %s exited before it was ready (see %s)", n.ID, n.log)
	case <-ctx.Done():
		return fmt.Errorf("chaos: node %s not ready: %w", n.ID, ctx.Err())
	}
}

// Running reports whether the node's process runs (paused or not).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

// Kill sends SIGKILL and waits for the process to go.
func (c *Cluster) Kill(n *Node) {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd, n.paused = nil, false
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// KillTogether sends SIGKILL to every node given before it waits for any
// of them: they go down at once.
func (c *Cluster) KillTogether(nodes []*Node) {
	var exits []chan struct{}
	for _, n := range nodes {
		n.mu.Lock()
		cmd, exited := n.cmd, n.exited
		n.cmd, n.paused = nil, false
		n.mu.Unlock()
		if cmd != nil {
			cmd.Process.Signal(syscall.SIGKILL)
			exits = append(exits, exited)
		}
	}
	for _, e := range exits {
		<-e
	}
}

// Pause stops the process (SIGSTOP): its sockets stay open, nothing
// answers.
func (c *Cluster) Pause(n *Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && !n.paused {
		n.cmd.Process.Signal(syscall.SIGSTOP)
		n.paused = true
	}
}

// Resume continues a paused process (SIGCONT).
func (c *Cluster) Resume(n *Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && n.paused {
		n.cmd.Process.Signal(syscall.SIGCONT)
		n.paused = false
	}
}

// crashed reports whether the node's process exited without being killed
// or stopped: a crash, which the suite reports rather than hides.
func (n *Node) crashed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return true
	default:
		return false
	}
}

// Heal resumes every paused node and restarts every dead one, then waits
// until all are ready. A node whose process exited by itself is an error.
func (c *Cluster) Heal(ctx context.Context) error {
	for _, n := range c.Nodes {
		if n.crashed() {
			return fmt.Errorf("chaos: node %s exited by itself (see %s)", n.ID, n.log)
		}
		c.Resume(n)
		if !n.Running() {
			if err := c.Start(n); err != nil {
				return err
			}
		}
	}
	for _, n := range c.Nodes {
		if err := c.WaitReady(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// Shutdown kills every node.
func (c *Cluster) Shutdown() {
	for _, n := range c.Nodes {
		c.Resume(n)
		c.Kill(n)
	}
}

// Stop sends SIGTERM and waits up to 30 s for a clean exit, then kills.
func (c *Cluster) Stop(n *Node) {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	c.Resume(n)
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
	}
	c.Kill(n)
}
