package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// diskSize is a flag value for a size of disk space: bytes with an
// optional unit (KiB, MiB, GiB, TiB, or KB, MB, GB, TB in powers of ten),
// or "off" (also 0) for none, which it holds as -1.
type diskSize int64

var sizeUnits = []struct {
	suffix string
	factor int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

func (s *diskSize) Set(v string) error {
	t := strings.ToLower(strings.TrimSpace(v))
	if t == "off" || t == "0" {
		*s = -1
		return nil
	}
	factor := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, factor = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.factor
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || f*float64(factor) >= math.MaxInt64 {
		return fmt.Errorf("%q is not a size: write bytes with an optional unit, such as 1GiB or 512MiB, or off", v)
	}
	n := int64(f * float64(factor))
	if n == 0 {
		*s = -1
		return nil
	}
	*s = diskSize(n)
	return nil
}

func (s *diskSize) String() string {
	n := int64(*s)
	switch {
	case n < 0:
		return "off"
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return strconv.FormatInt(n, 10)
}

func (s *diskSize) Type() string { return "size" }
