package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The connection header. A connection to a node's Raft port opens with
//
//	magic   4 bytes  "FQRG"
//	version 1 byte   HeaderVersion or HeaderMemberVersion
//	length  1 byte   length of the group id, 1..MaxGroupIDLen
//	group   length bytes
//	length  1 byte   length of the member id, 0..MaxGroupIDLen (HeaderMemberVersion only)
//	member  length bytes: the member of the group the connection is for
//
// and then carries hashicorp/raft's NetworkTransport protocol for that group
// (or, for RPCGroup, node-to-node calls).
const (
	headerMagic = "FQRG"
	// HeaderVersion is the version byte of a header that names a group
	// only; every version reads it.
	HeaderVersion = 1
	// HeaderMemberVersion is the version byte of a header that also names
	// the member of the group it is for: the mux refuses it when the
	// group's member on this node is another one. Nodes of
	// RaftProtocol 2 and later read it.
	HeaderMemberVersion = 2
	// MaxGroupIDLen is the longest group id the header can carry.
	MaxGroupIDLen = 255
)

// What a node speaks on its Raft port, as its gossip metadata says
// (NodeMeta.RaftProtocol; Mux.SetProtocols).
const (
	// ProtocolUnknown: nothing is known of the node at an address.
	ProtocolUnknown = 0
	// ProtocolGroups: headers naming a group only (HeaderVersion), and
	// the voter's id smuggled in RequestVote (votegate.go). The versions
	// before RaftProtocol 2, which do not advertise one.
	ProtocolGroups = 1
	// ProtocolMembers: ProtocolGroups, plus headers naming a member
	// (HeaderMemberVersion) and node-to-node calls (RPCGroup).
	ProtocolMembers = 2
	// ProtocolHeartbeats: ProtocolMembers, plus the heartbeats of every
	// group between two nodes on one connection (HeartbeatGroup).
	ProtocolHeartbeats = 3
	// ProtocolCatchUp: ProtocolHeartbeats, plus heartbeat answers that
	// say when the follower holds entries it has not applied (it may not
	// know they are committed); an idle leader sends such a follower its
	// appends that tell nothing new only then (pipeline.go).
	ProtocolCatchUp = 4
	// ProtocolSleep: ProtocolCatchUp, plus sleeping groups: a leader's
	// word that it put a group to sleep, a node's request to wake a
	// member, and a node that wakes a member it holds asleep when asked
	// anything of it (sleep.go).
	ProtocolSleep = 5
	// RaftProtocol is what this version speaks and advertises.
	RaftProtocol = ProtocolSleep
)

// MemberAddress is the address a Layer dials to reach member of its
// group at addr (host:port): the connection's header names the member.
// Raft's configurations keep plain addresses; the vote gate makes these
// for each request from the server id Raft gives with it.
func MemberAddress(addr, member string) string { return addr + "/" + member }

// splitMemberAddress is MemberAddress undone; member is empty for a plain
// address. A host:port never holds "/", a member id may.
func splitMemberAddress(s string) (addr, member string) {
	addr, member, _ = strings.Cut(s, "/")
	return addr, member
}

const (
	// HeaderTimeout is how long an accepted connection has to send its
	// header before it is closed.
	HeaderTimeout = 5 * time.Second
	// maxHandshakes bounds the accepted connections whose header is being
	// read at once. A legitimate peer sends its header with the dial, so a
	// slot is held for microseconds; only slow or silent peers hold one for
	// up to HeaderTimeout. When all are taken, the accept loop waits and new
	// connections queue in the kernel's backlog.
	maxHandshakes = 128
	// layerBacklog is how many dispatched connections a Layer queues before
	// its Accept takes them.
	layerBacklog = 16
)

// Mux splits one TCP listener between the Raft groups of a node. Each
// connection opens with a header naming its group, and maybe the member of
// the group it is for (see HeaderVersion); the Mux reads it and hands the
// connection to that group's Layer. A bad header, an unknown group, or a
// member other than the one the group's Layer is for, closes the
// connection and nothing else.
//
// Lifecycle: NewMux, Layer for each group (before or after Start), Start,
// and Close after every Group using the mux is closed.
type Mux struct {
	ln     net.Listener
	logger *slog.Logger

	sem  chan struct{} // one token per handshake in progress
	done chan struct{} // closed by Close
	wg   sync.WaitGroup
	// headerTimeout is HeaderTimeout; tests lengthen it.
	headerTimeout time.Duration

	// peerTLS, when set, is the TLS config of the connections the mux's
	// layers dial (SetTLS).
	peerTLS atomic.Pointer[tls.Config]

	// protocols tells what the node at a Raft address speaks; nil: every
	// node speaks RaftProtocol.
	protocols atomic.Pointer[func(addr string) int]

	// hb carries every group's heartbeats to and from other nodes.
	hb *heartbeats

	// asleep wakes a group the node holds asleep (SetAsleep).
	asleep atomic.Pointer[func(group string) bool]

	mu      sync.Mutex
	layers  map[string]*Layer
	pending map[net.Conn]struct{} // accepted, header not read yet
	started bool
	closed  bool
}

// SetTLS makes the connections the mux's layers dial TLS with cfg (the
// node's certificate, peers checked against the cluster's CA). The
// listener given to NewMux does its side: a tls.Listener that requires
// peers' certificates. Call it before Start.
func (m *Mux) SetTLS(cfg *tls.Config) { m.peerTLS.Store(cfg) }

// SetProtocols sets how the mux learns what the node at a Raft address
// speaks (ProtocolUnknown, ProtocolGroups, RaftProtocol...): usually
// Membership.ProtocolOf. Without it every node is taken to speak
// RaftProtocol. Headers naming a member go only to nodes that speak it.
func (m *Mux) SetProtocols(f func(addr string) int) { m.protocols.Store(&f) }

// Protocol returns what the node at a Raft address speaks, as far as the
// mux knows.
func (m *Mux) Protocol(addr string) int {
	if f := m.protocols.Load(); f != nil && *f != nil {
		return (*f)(addr)
	}
	return RaftProtocol
}

// NewMux returns a Mux serving ln. It starts nothing: call Start. A nil
// logger discards.
func NewMux(ln net.Listener, logger *slog.Logger) *Mux {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Mux{
		ln:            ln,
		logger:        logger.With("component", "raft-mux", "addr", ln.Addr().String()),
		sem:           make(chan struct{}, maxHandshakes),
		done:          make(chan struct{}),
		headerTimeout: HeaderTimeout,
		layers:        make(map[string]*Layer),
		pending:       make(map[net.Conn]struct{}),
	}
	m.hb = newHeartbeats(m, m.addLayer(HeartbeatGroup, ""))
	return m
}

// Addr returns the listener's address.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

// Start runs the accept loop in a goroutine that Close stops. Starting a
// started or closed Mux returns an error.
func (m *Mux) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if m.started {
		return errors.New("cluster: mux already started")
	}
	m.started = true
	m.wg.Add(1)
	go m.serve()
	m.hb.start()
	return nil
}

// Close closes the listener, every Layer still registered and every
// connection whose header is still being read, then waits for the Mux's
// goroutines to return. It is idempotent. Close the Groups first: a Group
// whose Layer is closed under it only logs accept errors until it is closed.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	m.mu.Unlock()
	// The listener first: a peer that sees this node's connections end
	// and dials it finds the port closed, as after the process died, and
	// its groups' successors stand (successor.go).
	err := m.ln.Close()
	m.hb.close()
	m.mu.Lock()
	layers := make([]*Layer, 0, len(m.layers))
	for _, l := range m.layers {
		layers = append(layers, l)
	}
	for c := range m.pending {
		c.Close()
	}
	m.mu.Unlock()

	for _, l := range layers {
		l.Close()
	}
	m.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Layer registers group on the mux and returns its stream layer, which
// hashicorp/raft's NetworkTransport uses to accept and dial connections of
// that group. Closing the Layer unregisters it. The layer takes
// connections for any member (see MemberLayer).
func (m *Mux) Layer(group string) (*Layer, error) { return m.MemberLayer(group, "") }

// MemberLayer is Layer for the group's member on this node: a connection
// whose header names another member of the group (a request meant for a
// member that was at this address before) is refused. An empty member
// takes any.
func (m *Mux) MemberLayer(group, member string) (*Layer, error) {
	if err := checkGroupID(group); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if _, ok := m.layers[group]; ok {
		return nil, fmt.Errorf("%w: %q", ErrGroupExists, group)
	}
	if len(member) > MaxGroupIDLen {
		return nil, fmt.Errorf("%w: member id of %d bytes", ErrBadGroupID, len(member))
	}
	return m.addLayer(group, member), nil
}

// addLayer registers a new layer; the caller checked the ids, and holds mu
// unless the mux is being made.
func (m *Mux) addLayer(group, member string) *Layer {
	l := &Layer{
		mux:    m,
		group:  group,
		member: member,
		ch:     make(chan net.Conn, layerBacklog),
		done:   make(chan struct{}),
		conns:  make(map[*layerConn]struct{}),
	}
	m.layers[group] = l
	return l
}

func checkGroupID(group string) error {
	if len(group) == 0 || len(group) > MaxGroupIDLen {
		return fmt.Errorf("%w: %d bytes, want 1..%d", ErrBadGroupID, len(group), MaxGroupIDLen)
	}
	return nil
}

func (m *Mux) serve() {
	defer m.wg.Done()
	acc := NewAcceptor(m.ln, m.done, m.logger)
	for {
		c, err := acc.Accept()
		if err != nil {
			select {
			case <-m.done:
			default:
				m.logger.Error("raft listener closed under the mux", "error", err)
			}
			return
		}
		select {
		case m.sem <- struct{}{}:
		case <-m.done:
			c.Close()
			return
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			c.Close()
			<-m.sem
			return
		}
		m.pending[c] = struct{}{}
		m.wg.Add(1)
		m.mu.Unlock()
		go m.handshake(c)
	}
}

// handshake reads c's header and hands c to its group's layer.
func (m *Mux) handshake(c net.Conn) {
	defer m.wg.Done()
	defer func() { <-m.sem }()
	deadline := time.Now().Add(m.headerTimeout)
	if tc, ok := c.(*tls.Conn); ok {
		// A peer without a certificate of the cluster's CA ends here.
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			m.logger.Warn("refused a raft connection: TLS handshake failed", "remote", c.RemoteAddr().String(), "error", err)
			m.forget(c)
			c.Close()
			return
		}
	}
	group, member, err := readHeader(c, deadline)
	var l *Layer
	if err == nil {
		m.mu.Lock()
		l = m.layers[group]
		m.mu.Unlock()
		if l == nil {
			err = fmt.Errorf("unknown group %q", group)
			if m.askedOf(group) {
				err = fmt.Errorf("group %q is asleep here; waking it", group)
			}
		} else if member != "" && l.member != "" && member != l.member {
			// Addressed to a member this node no longer runs: answering
			// as it would let a new, empty member vote in the old one's
			// name (cluster/DESIGN.md, "A vote is asked of a member").
			l.refused.Add(1)
			err = fmt.Errorf("group %q: connection for member %q, this node runs %q", group, member, l.member)
		}
	}
	if err != nil {
		m.logger.Debug("dropping raft connection", "remote", c.RemoteAddr().String(), "error", err)
		m.forget(c)
		c.Close()
		return
	}
	// The layer tracks c before the mux forgets it, so a Close of either
	// always finds it.
	l.deliver(c, deadline)
	m.forget(c)
}

func (m *Mux) forget(c net.Conn) {
	m.mu.Lock()
	delete(m.pending, c)
	m.mu.Unlock()
}

// unregister removes a closed layer. Its group takes no more heartbeats
// either: a group's registration on the mux is its layer.
func (m *Mux) unregister(l *Layer) {
	m.mu.Lock()
	mine := m.layers[l.group] == l
	if mine {
		delete(m.layers, l.group)
	}
	m.mu.Unlock()
	if mine && m.hb != nil {
		m.hb.unregister(l.group, nil)
	}
}

// readHeader reads the connection header from c, which must arrive before
// deadline, and clears the deadline again. member is empty for a header
// of HeaderVersion.
func readHeader(c net.Conn, deadline time.Time) (group, member string, err error) {
	if err := c.SetReadDeadline(deadline); err != nil {
		return "", "", err
	}
	var fixed [len(headerMagic) + 2]byte
	if _, err := io.ReadFull(c, fixed[:]); err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrBadHeader, err)
	}
	if string(fixed[:len(headerMagic)]) != headerMagic {
		return "", "", fmt.Errorf("%w: bad magic %q", ErrBadHeader, fixed[:len(headerMagic)])
	}
	v := fixed[len(headerMagic)]
	if v != HeaderVersion && v != HeaderMemberVersion {
		return "", "", fmt.Errorf("%w: version %d", ErrBadHeader, v)
	}
	n := int(fixed[len(headerMagic)+1])
	if n == 0 {
		return "", "", fmt.Errorf("%w: empty group id", ErrBadHeader)
	}
	if group, err = readID(c, n); err != nil {
		return "", "", fmt.Errorf("%w: group id: %v", ErrBadHeader, err)
	}
	if v == HeaderMemberVersion {
		var l [1]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return "", "", fmt.Errorf("%w: member id: %v", ErrBadHeader, err)
		}
		if member, err = readID(c, int(l[0])); err != nil {
			return "", "", fmt.Errorf("%w: member id: %v", ErrBadHeader, err)
		}
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return "", "", err
	}
	return group, member, nil
}

func readID(c net.Conn, n int) (string, error) {
	id := make([]byte, n)
	if _, err := io.ReadFull(c, id); err != nil {
		return "", err
	}
	return string(id), nil
}

// appendHeader appends the connection header for group to b; with a
// member, the header names it too (HeaderMemberVersion).
func appendHeader(b []byte, group string, member ...string) []byte {
	b = append(b, headerMagic...)
	if len(member) == 0 || member[0] == "" {
		b = append(b, HeaderVersion, byte(len(group)))
		return append(b, group...)
	}
	b = append(b, HeaderMemberVersion, byte(len(group)))
	b = append(b, group...)
	b = append(b, byte(len(member[0])))
	return append(b, member[0]...)
}

// Layer is one group's share of a Mux: a raft.StreamLayer whose Accept
// returns the connections that named the group and whose Dial opens
// connections that name it. It tracks every connection it accepted or
// dialled, and Close closes them all, so closing a Group frees all its
// sockets. Other groups on the mux are not affected.
type Layer struct {
	mux    *Mux
	group  string
	member string // the group's member on this node; "" takes any
	ch     chan net.Conn
	done   chan struct{}
	// refused counts the connections refused for naming another member.
	refused atomic.Int64

	// onAccept, when set, is called with each connection accepted, before
	// Accept can return it (the group's gate starts its loop: votegate.go).
	onAccept atomic.Pointer[func()]

	mu       sync.Mutex
	conns    map[*layerConn]struct{}
	accepted int // of conns, those accepted, not dialled
	closed   bool
}

var _ raft.StreamLayer = (*Layer)(nil)

// Group returns the layer's group id.
func (l *Layer) Group() string { return l.group }

// Accept waits for the next connection of the group. After Close it
// returns an error matching ErrClosed.
func (l *Layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, fmt.Errorf("cluster: layer %q: %w", l.group, ErrClosed)
	}
}

// Close unregisters the layer from its mux, makes a pending Accept return
// and closes every connection the layer accepted or dialled. It is
// idempotent.
func (l *Layer) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	conns := l.conns
	l.conns = nil
	l.accepted = 0
	l.mu.Unlock()

	l.mux.unregister(l)
	for c := range conns {
		c.closed.Store(true)
		c.Conn.Close()
	}
	return nil
}

// Addr returns the mux listener's address.
func (l *Layer) Addr() net.Addr { return l.mux.ln.Addr() }

// Dial connects to the Raft port at address and sends the header naming the
// layer's group, and the member if address names one (MemberAddress). The
// timeout covers the connection and the header.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-l.done:
		return nil, fmt.Errorf("cluster: layer %q: %w", l.group, ErrClosed)
	default:
	}
	addr, member := splitMemberAddress(string(address))
	if len(member) > MaxGroupIDLen {
		return nil, fmt.Errorf("%w: member id of %d bytes", ErrBadGroupID, len(member))
	}
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	c, err := dialPeer(ctx, addr, l.mux.peerTLS.Load())
	cancel()
	if err != nil {
		return nil, err
	}
	hdr := appendHeader(make([]byte, 0, len(headerMagic)+3+len(l.group)+len(member)), l.group, member)
	if err := c.SetWriteDeadline(deadline); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := c.Write(hdr); err != nil {
		c.Close()
		return nil, fmt.Errorf("cluster: dial %s: header: %w", address, err)
	}
	if err := c.SetWriteDeadline(time.Time{}); err != nil {
		c.Close()
		return nil, err
	}
	tc := l.track(c, true)
	if tc == nil {
		c.Close()
		return nil, fmt.Errorf("cluster: layer %q: %w", l.group, ErrClosed)
	}
	return tc, nil
}

// deliver queues c for Accept, waiting until deadline at most.
func (l *Layer) deliver(c net.Conn, deadline time.Time) {
	tc := l.track(c, false)
	if tc == nil {
		c.Close()
		return
	}
	if fn := l.onAccept.Load(); fn != nil {
		(*fn)()
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case l.ch <- tc:
	case <-l.done:
		tc.Close()
	case <-t.C:
		l.mux.logger.Warn("raft group not accepting connections, dropping one", "group", l.group)
		tc.Close()
	}
}

// track wraps c, dialled by this node or accepted, so that the layer
// closes it on Close; nil if the layer is closed already.
func (l *Layer) track(c net.Conn, dialed bool) *layerConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	tc := &layerConn{Conn: c, layer: l, dialed: dialed}
	l.conns[tc] = struct{}{}
	if !dialed {
		l.accepted++
	}
	return tc
}

func (l *Layer) forget(c *layerConn) {
	l.mu.Lock()
	if _, ok := l.conns[c]; ok {
		delete(l.conns, c)
		if !c.dialed {
			l.accepted--
		}
	}
	l.mu.Unlock()
}

// acceptedOpen reports whether a connection the layer accepted is open:
// only over one can a request reach the group.
func (l *Layer) acceptedOpen() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accepted > 0
}

// layerConn is a connection tracked by its Layer until it is closed.
type layerConn struct {
	net.Conn
	layer  *Layer
	dialed bool // by this node (Dial), not accepted
	closed atomic.Bool
	once   sync.Once
	err    error
}

// Read reports a connection closed on this side as io.EOF, the end of the
// stream, rather than as a "use of closed network connection" error, which
// NetworkTransport would log at ERROR for every connection of every group
// that closes.
func (c *layerConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.closed.Load() {
		err = io.EOF
	}
	return n, err
}

func (c *layerConn) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		c.layer.forget(c)
		c.err = c.Conn.Close()
	})
	return c.err
}
