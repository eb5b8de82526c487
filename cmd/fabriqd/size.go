package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/fabriq-io/fabriq/cmd/internal/units"
)

// sizeOrOff is a flag value for a size (units.ParseBytes) of disk or memory,
// or "off" (also 0) for none, which it holds as -1.
type sizeOrOff int64

func (s *sizeOrOff) Set(v string) error {
	if strings.EqualFold(strings.TrimSpace(v), "off") {
		*s = -1
		return nil
	}
	n, err := units.ParseBytes(v)
	if err != nil {
		return fmt.Errorf("%w, or off", err)
	}
	if n == 0 {
		n = -1
	}
	*s = sizeOrOff(n)
	return nil
}

func (s *sizeOrOff) String() string {
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

func (s *sizeOrOff) Type() string { return "size" }

// sizeFlag is a flag value for a positive byte size (units.ParseBytes).
type sizeFlag int64

func (s *sizeFlag) String() string { return strconv.FormatInt(int64(*s), 10) }

func (*sizeFlag) Type() string { return "size" }

func (s *sizeFlag) Set(v string) error {
	n, err := units.ParseBytes(v)
	if err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("size %q: want a positive size", v)
	}
	*s = sizeFlag(n)
	return nil
}

// rateSizeFlag is a size a second, or 0 (also written off) for no limit.
type rateSizeFlag int64

func (s *rateSizeFlag) String() string { return strconv.FormatInt(int64(*s), 10) }

func (*rateSizeFlag) Type() string { return "size" }

func (s *rateSizeFlag) Set(v string) error {
	if v == "0" || v == "off" {
		*s = 0
		return nil
	}
	var n sizeFlag
	if err := n.Set(v); err != nil {
		return err
	}
	*s = rateSizeFlag(n)
	return nil
}
