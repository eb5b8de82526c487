package units

import "testing"

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1024": 1024, "512KiB": 512 << 10, "1GiB": 1 << 30, "2GB": 2e9, "10M": 10 << 20,
		" 7 MiB ": 7 << 20, "100B": 100, "1.5g": 3 << 29, "64kib": 64 << 10, "1TB": 1e12,
	} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-1", "-2KiB", "x", "9999999999999TiB", "1PiB", "NaN", "Inf", "1e30GiB"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
}
