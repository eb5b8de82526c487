package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fabriq-io/fabriq/cmd/internal/units"
)

// parseSize parses a byte size (units.ParseBytes), or -1 for no limit.
func parseSize(s string) (int64, error) {
	if strings.TrimSpace(s) == "-1" {
		return -1, nil
	}
	return units.ParseBytes(s)
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
