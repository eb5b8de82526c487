package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// sizeUnits are the byte units a size flag accepts, longest suffix first.
var sizeUnits = []struct {
	suffix string
	factor int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// parseSize parses a byte size: a whole number with an optional unit
// (B, KB/MB/GB/TB in powers of 1000, KiB/MiB/GiB/TiB or K/M/G/T in powers
// of 1024), or -1 for no limit.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "-1" {
		return -1, nil
	}
	num, factor := s, int64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, factor = strings.TrimSpace(n), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a whole number of bytes with an optional unit (1048576, 512KiB, 1GiB, 2GB) or -1", s)
	}
	if n > math.MaxInt64/factor {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * factor, nil
}

// parseAge parses a duration as Go writes them (90s, 1h30m) or with a day
// (d) or week (w) unit (7d, 2w), or -1 for no limit.
func parseAge(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "-1" {
		return -1, nil
	}
	for _, u := range []struct {
		suffix string
		unit   time.Duration
	}{{"d", 24 * time.Hour}, {"w", 7 * 24 * time.Hour}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil || v < 0 || v > int64(math.MaxInt64/u.unit) {
				return 0, fmt.Errorf("duration %q: want a whole number of %s", s, map[string]string{"d": "days", "w": "weeks"}[u.suffix])
			}
			return time.Duration(v) * u.unit, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("duration %q: want e.g. 90s, 30m, 12h, 7d, 2w, or -1", s)
	}
	return d, nil
}
