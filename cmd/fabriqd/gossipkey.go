package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strings"
)

// readGossipKeys reads --gossip-key-file: one key a line, base64 of 16,
// 24 or 32 bytes (`head -c 32 /dev/urandom | base64`); blank lines and
// lines starting with # are skipped. The first key seals gossip, every
// key opens it (a rotation: add the new key after the old on every node,
// then move it first on every node, then drop the old one).
func readGossipKeys(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("--gossip-key-file %s: line %d: not base64: %w", path, i+1, err)
		}
		if l := len(k); l != 16 && l != 24 && l != 32 {
			return nil, fmt.Errorf("--gossip-key-file %s: line %d: a key of %d bytes, want 16, 24 or 32", path, i+1, l)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--gossip-key-file %s: no key", path)
	}
	return keys, nil
}
