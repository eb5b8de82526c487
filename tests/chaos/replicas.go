package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fabriq-io/fabriq/broker"
	"github.com/fabriq-io/fabriq/client"
	"github.com/fabriq-io/fabriq/geofabric"
)

// ReplicasResult says whether every replica of every partition holds the
// same log, byte for byte.
type ReplicasResult struct {
	Valid      bool     `json:"valid"`
	Partitions int      `json:"partitions"`
	Copies     int      `json:"copies"`
	Examples   []string `json:"examples,omitempty"`
}

// WaitCaughtUp wakes the streams and holds them awake, and waits until
// every running node reports the same start and next offsets for each
// partition of the streams it holds, and every
// current replica (placement, by partition directory name, when not nil)
// reports them: a copy closed for a while (one stopped for lack of disk
// space waits before it opens again) is waited for.
func WaitCaughtUp(ctx context.Context, c *Cluster, streams []string, placement map[string][]string) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	// One client per node for the whole wait: a connection per poll
	// would churn hundreds of connections through the namespaces.
	clients := make([]*client.Client, len(c.Nodes))
	for i, n := range c.Nodes {
		cl, err := client.New(client.Options{URL: "fabriq://" + n.Client, OperationTimeout: 5 * time.Second})
		if err != nil {
			return err
		}
		defer cl.Close()
		clients[i] = cl
	}
	// A producer on each stream holds every partition awake, so that
	// each copy is open to report its offsets: with no client attached,
	// partitions sleep (--sleep-after) and their copies are closed.
	waker, err := client.New(client.Options{URL: c.URL(), OperationTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer waker.Close()
	for _, s := range streams {
		for {
			p, err := waker.CreateProducer(ctx, client.ProducerOptions{Stream: s})
			if err == nil {
				defer p.Close()
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("a producer to hold %s awake: %w", s, err)
			case <-tick.C:
			}
		}
	}
	for {
		same, views := true, map[string]string{}
		var errs []string
		for i, n := range c.Nodes {
			cl := clients[i]
			for _, s := range streams {
				dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				info, err := cl.DescribeStreamLocal(dctx, s)
				cancel()
				if err != nil {
					same = false
					errs = append(errs, fmt.Sprintf("%s: %v", n.ID, err))
					continue
				}
				for _, p := range info.Partitions {
					if p.NextOffset == 0 && p.Leader == "" {
						if placed(placement, s, int(p.Partition), len(info.Partitions), n.ID) {
							same = false
							errs = append(errs, fmt.Sprintf("%s: partition %d of %s not open", n.ID, p.Partition, s))
						}
						continue // not a replica here
					}
					k := fmt.Sprintf("%s/%d", s, p.Partition)
					v := fmt.Sprintf("%d..%d", p.StartOffset, p.NextOffset)
					if prev, ok := views[k]; ok && prev != v {
						same = false
					}
					views[k] = v
				}
			}
		}
		if same {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replicas did not catch up: %v; errors %v", views, errs)
		case <-tick.C:
		}
	}
}

// placed reports whether placement puts partition i of stream s (of n
// partitions) on node.
func placed(placement map[string][]string, s string, i, n int, node string) bool {
	st, err := geofabric.ParseStream(s)
	if err != nil || placement == nil {
		return false
	}
	dir, err := broker.PartitionDir("", st.Partition(i, n).String())
	return err == nil && slices.Contains(placement[filepath.Base(dir)], node)
}

// CompareReplicas hashes each partition's log segments on every node that
// holds the partition (the nodes are stopped) and reports differences.
// replicas, when not nil, names the current replicas of each partition
// (by its directory name): copies left on other nodes by a replica move
// are not compared.
func CompareReplicas(c *Cluster, tenant, fabric string, replicas map[string][]string) ReplicasResult {
	var r ReplicasResult
	hashes := map[string]map[string]string{} // partition → node → hash
	for _, n := range c.Nodes {
		root := filepath.Join(n.Dir, "partitions", tenant, fabric)
		parts, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, p := range parts {
			if replicas != nil && !slices.Contains(replicas[p.Name()], n.ID) {
				continue
			}
			h, err := hashSegments(filepath.Join(root, p.Name(), "log"))
			if err != nil {
				r.Examples = append(r.Examples, fmt.Sprintf("%s on %s: %v", p.Name(), n.ID, err))
				continue
			}
			if hashes[p.Name()] == nil {
				hashes[p.Name()] = map[string]string{}
			}
			hashes[p.Name()][n.ID] = h
		}
	}
	names := make([]string, 0, len(hashes))
	for p := range hashes {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		r.Partitions++
		distinct := map[string][]string{}
		for node, h := range hashes[p] {
			r.Copies++
			distinct[h] = append(distinct[h], node)
		}
		if len(distinct) > 1 && len(r.Examples) < maxListed {
			var parts []string
			for h, nodes := range distinct {
				sort.Strings(nodes)
				parts = append(parts, fmt.Sprintf("%v: %s", nodes, h[:12]))
			}
			sort.Strings(parts)
			r.Examples = append(r.Examples, fmt.Sprintf("%s differs: %s", p, strings.Join(parts, "; ")))
		}
	}
	r.Valid = len(r.Examples) == 0 && r.Partitions > 0
	return r
}

// hashSegments hashes the segment files of a log directory in name order.
func hashSegments(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Placement returns the current replicas of every partition of streams, by
// partition directory name.
func Placement(ctx context.Context, url string, streams []string) (map[string][]string, error) {
	cl, err := client.New(client.Options{URL: url, OperationTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	out := map[string][]string{}
	for _, s := range streams {
		info, err := cl.DescribeStreamLocal(ctx, s)
		if err != nil {
			return nil, err
		}
		st, err := geofabric.ParseStream(s)
		if err != nil {
			return nil, err
		}
		for _, p := range info.Partitions {
			dir, err := broker.PartitionDir("", st.Partition(int(p.Partition), len(info.Partitions)).String())
			if err != nil {
				return nil, err
			}
			out[filepath.Base(dir)] = p.Replicas
		}
	}
	return out, nil
}
