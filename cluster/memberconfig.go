package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// memberlist settings the configuration does not expose.
const (
	// mlTCPTimeout bounds a push-pull or a reliable message on its stream:
	// the dial, and every read and write. memberlist's LAN default is 10s;
	// a push-pull of a large routing table takes milliseconds on a LAN.
	mlTCPTimeout = 5 * time.Second
	// mlRetransmitMult: a broadcast is sent RetransmitMult × ⌈log10(N+1)⌉
	// times (memberlist's LAN default). Used for our queue as well.
	mlRetransmitMult = 4
	// mlReclaimTime is how long a dead node's name stays bound to its old
	// address. A node restarted with a new address can take its name back
	// as soon as the others have declared the old one dead (see DESIGN.md).
	// memberlist's default, 0, never allows it.
	mlReclaimTime = time.Nanosecond
)

// MembershipConfig configures a Membership. The zero value of every
// optional field means its default; DefaultMembershipConfig lists them. The
// few memberlist knobs exposed here are mapped to memberlist.Config by
// Start; memberlist.Config itself is not part of the API.
type MembershipConfig struct {
	// NodeID is this node's stable id: its name in memberlist, and its Raft
	// server id. 1..255 bytes. Required.
	NodeID string
	// BindAddr is where gossip listens, TCP and UDP on the same port, as
	// IP:port. Port 0 picks a free port; Membership.Addr reports it.
	// Default "0.0.0.0:7946".
	BindAddr string
	// AdvertiseAddr is the gossip address other nodes use for this one, as
	// IP:port; port 0 means the bound port. Default: BindAddr's IP, or a
	// private address of the host when BindAddr's IP is 0.0.0.0.
	AdvertiseAddr string
	// Meta is what this node advertises. Meta.ID may be left empty and is
	// then NodeID; it may not be anything else. Its encoding must fit in
	// memberlist.MetaMaxSize (512) bytes: Validate returns ErrMetaTooLarge
	// otherwise.
	Meta NodeMeta
	// Join lists host:port gossip addresses of nodes that may already be in
	// the cluster. Start tries them in the background, with backoff, until
	// one of them answers or the node closes. Empty: this node waits for
	// others to join it.
	Join []string

	// ProbeInterval is how often this node probes a random member. Default
	// 500ms.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for a direct answer before
	// asking other members to probe indirectly. It should be above the
	// network's 99th-percentile round trip. Below ProbeInterval. Default
	// 250ms, or half of ProbeInterval when that is shorter.
	ProbeTimeout time.Duration
	// SuspicionMult sets how long a member that failed a probe is suspected
	// before it is declared dead: SuspicionMult × max(1, log10 N) probe
	// intervals in a cluster of N nodes, during which it can refute.
	// Default 4.
	SuspicionMult int
	// GossipInterval is how often this node gossips what is queued
	// (membership changes, routes) to 3 random members. Default 100ms.
	GossipInterval time.Duration
	// PushPullInterval is how often this node exchanges its full state,
	// membership and routing table, with one random member over TCP
	// (anti-entropy); it repairs whatever gossip lost. Default 15s.
	PushPullInterval time.Duration
	// TombstoneTTL is how long a forgotten partition's tombstone is kept and
	// gossiped (see Routes.Forget). Default 1h.
	TombstoneTTL time.Duration

	// Keys, when set, encrypt and authenticate gossip (AES-GCM, memberlist's
	// keyring): every message is sealed with the first key, and one sealed
	// with any of them is taken; a message that none opens, or that is not
	// sealed, is dropped, so a node without a key of the cluster cannot
	// join it or be told anything. Each key is 16, 24 or 32 bytes. Rotate
	// by adding the new key after the old on every node, then putting it
	// first on every node, then removing the old.
	Keys [][]byte

	// Logger receives the membership's and memberlist's logs. Nil discards.
	Logger *slog.Logger
}

// DefaultMembershipConfig returns the defaults of every optional field.
// With them a failed node is declared dead by every other member within
// 4.3s in a cluster of up to 10 nodes (DetectionTime); 3 to 4s measured.
func DefaultMembershipConfig() MembershipConfig {
	return MembershipConfig{
		BindAddr:         "0.0.0.0:7946",
		ProbeInterval:    500 * time.Millisecond,
		ProbeTimeout:     250 * time.Millisecond,
		SuspicionMult:    4,
		GossipInterval:   100 * time.Millisecond,
		PushPullInterval: 15 * time.Second,
		TombstoneTTL:     time.Hour,
	}
}

func (c MembershipConfig) withDefaults() MembershipConfig {
	d := DefaultMembershipConfig()
	if c.BindAddr == "" {
		c.BindAddr = d.BindAddr
	}
	if c.Meta.ID == "" {
		c.Meta.ID = c.NodeID
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = d.ProbeInterval
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = min(d.ProbeTimeout, c.ProbeInterval/2)
	}
	if c.SuspicionMult == 0 {
		c.SuspicionMult = d.SuspicionMult
	}
	if c.GossipInterval == 0 {
		c.GossipInterval = d.GossipInterval
	}
	if c.PushPullInterval == 0 {
		c.PushPullInterval = d.PushPullInterval
	}
	if c.TombstoneTTL == 0 {
		c.TombstoneTTL = d.TombstoneTTL
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports what is wrong with the configuration once its defaults
// are filled in. An oversized Meta gives an error matching ErrMetaTooLarge.
func (c MembershipConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if len(c.NodeID) == 0 || len(c.NodeID) > maxNodeIDLen {
		errs = append(errs, fmt.Errorf("NodeID of %d bytes, want 1..%d", len(c.NodeID), maxNodeIDLen))
	}
	if c.Meta.ID != c.NodeID {
		errs = append(errs, fmt.Errorf("Meta.ID %q differs from NodeID %q", c.Meta.ID, c.NodeID))
	}
	for i, k := range c.Keys {
		if l := len(k); l != 16 && l != 24 && l != 32 {
			errs = append(errs, fmt.Errorf("gossip key %d is %d bytes, want 16, 24 or 32", i+1, l))
		}
	}
	if err := checkMeta(c.Meta); err != nil {
		errs = append(errs, err)
	}
	bindIP, bindPort, err := splitIPPort(c.BindAddr)
	if err != nil {
		errs = append(errs, fmt.Errorf("BindAddr: %w", err))
	}
	if c.AdvertiseAddr != "" {
		ip, port, err := splitIPPort(c.AdvertiseAddr)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("AdvertiseAddr: %w", err))
		case ip.IsUnspecified():
			errs = append(errs, fmt.Errorf("AdvertiseAddr %q: not an address others can reach", c.AdvertiseAddr))
		case port != 0 && bindPort == 0:
			// memberlist advertises the bound port when it picks one.
			errs = append(errs, fmt.Errorf("AdvertiseAddr %q: a port other than 0 needs a fixed BindAddr port", c.AdvertiseAddr))
		}
	} else if err == nil && bindIP.IsUnspecified() && bindIP.String() != "0.0.0.0" {
		errs = append(errs, fmt.Errorf("BindAddr %q: an unspecified address other than 0.0.0.0 needs an AdvertiseAddr", c.BindAddr))
	}
	for _, j := range c.Join {
		if _, port, err := net.SplitHostPort(j); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("address %q in Join is not host:port", j))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		min  time.Duration
	}{
		{"ProbeInterval", c.ProbeInterval, 10 * time.Millisecond},
		{"ProbeTimeout", c.ProbeTimeout, time.Millisecond},
		{"GossipInterval", c.GossipInterval, time.Millisecond},
		{"PushPullInterval", c.PushPullInterval, 100 * time.Millisecond},
		{"TombstoneTTL", c.TombstoneTTL, time.Second},
	} {
		if d.v < d.min {
			errs = append(errs, fmt.Errorf("%s %v is below %v", d.name, d.v, d.min))
		}
	}
	if c.ProbeTimeout >= c.ProbeInterval {
		errs = append(errs, fmt.Errorf("ProbeTimeout %v is not below ProbeInterval %v", c.ProbeTimeout, c.ProbeInterval))
	}
	if c.SuspicionMult < 1 {
		errs = append(errs, fmt.Errorf("SuspicionMult %d is below 1", c.SuspicionMult))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster: membership config: %w", err)
	}
	return nil
}

// DetectionTime is how long after a node fails, on a healthy network, the
// members of a cluster of n nodes take at most to have all declared it
// dead: four probe intervals until a member has probed it and given up
// (each member probes the others in turn, in an order shuffled every
// round, one per interval, and a failed probe lasts an interval), the
// suspicion timeout of SuspicionMult × max(1, log10 n) probe intervals,
// and three gossip intervals for the verdict to reach everyone. With the
// defaults it is 4.3s up to 10 nodes. Suspicion lasts up to 6 times longer
// when other members do not confirm it in time, as when the prober itself
// is struggling.
func (c MembershipConfig) DetectionTime(n int) time.Duration {
	c = c.withDefaults()
	scale := math.Max(1, math.Log10(float64(max(n, 1))))
	suspicion := time.Duration(float64(c.SuspicionMult) * scale * float64(c.ProbeInterval))
	return 4*c.ProbeInterval + suspicion + 3*c.GossipInterval
}

// memberlistConfig maps the configuration, defaults filled, to
// memberlist's.
func (c MembershipConfig) memberlistConfig(d mlDelegate) (*memberlist.Config, error) {
	mc := memberlist.DefaultLANConfig()
	if len(c.Keys) > 0 {
		kr, err := memberlist.NewKeyring(c.Keys, c.Keys[0])
		if err != nil {
			return nil, fmt.Errorf("cluster: gossip keys: %w", err)
		}
		mc.Keyring = kr
		mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	}
	mc.Name = c.NodeID
	bindIP, bindPort, _ := splitIPPort(c.BindAddr) // validated
	mc.BindAddr = bindIP.String()
	mc.BindPort = bindPort
	mc.AdvertiseAddr = ""
	mc.AdvertisePort = bindPort // memberlist replaces it when it picks the port
	if c.AdvertiseAddr != "" {
		ip, port, _ := splitIPPort(c.AdvertiseAddr)
		mc.AdvertiseAddr = ip.String()
		if port != 0 {
			mc.AdvertisePort = port
		}
	}
	mc.ProbeInterval = c.ProbeInterval
	mc.ProbeTimeout = c.ProbeTimeout
	mc.SuspicionMult = c.SuspicionMult
	mc.GossipInterval = c.GossipInterval
	mc.PushPullInterval = c.PushPullInterval
	mc.GossipToTheDeadTime = c.PushPullInterval
	mc.TCPTimeout = mlTCPTimeout
	mc.RetransmitMult = mlRetransmitMult
	mc.DeadNodeReclaimTime = mlReclaimTime
	mc.Delegate = d
	mc.Events = d
	mc.Conflict = d
	mc.LogOutput = nil
	mc.Logger = newMLLogger(c.Logger)
	return mc, nil
}

// splitIPPort parses IP:port; the port may be 0.
func splitIPPort(addr string) (net.IP, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, 0, err
	}
	if host == "" {
		host = "0.0.0.0"
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, 0, fmt.Errorf("%q: host is not an IP address", addr)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, 0, fmt.Errorf("%q: bad port", addr)
	}
	return ip, int(port), nil
}
