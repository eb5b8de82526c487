// Package units parses the byte sizes that fabriq's commands take as flags:
// a number with an optional unit, written as operators write them.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteUnits are the units a size accepts, matched without regard to case,
// longest suffix first.
var byteUnits = []struct {
	suffix string
	factor float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseBytes parses a size in bytes: a number (a fraction too, as in
// 1.5GiB) with an optional unit — B; KB, MB, GB, TB in powers of 1000;
// KiB, MiB, GiB, TiB or K, M, G, T in powers of 1024 — in any case, with
// spaces allowed around the number. A fraction of a byte is dropped.
// Negative sizes are refused: callers give -1 or "off" their own meaning.
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	factor := 1.0
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(t, u.suffix); ok {
			t, factor = strings.TrimSpace(n), u.factor
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit, such as 1048576, 512KiB, 1.5GiB or 2GB", s)
	}
	if f*factor >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(f * factor), nil
}
