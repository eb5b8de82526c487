package main

import (
	"testing"
	"time"

	"github.com/fabriq-io/fabriq/client"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1024": 1024, "512KiB": 512 << 10, "1GiB": 1 << 30, "2GB": 2e9, "10M": 10 << 20, "7 MiB": 7 << 20, "-1": -1, "100B": 100, "1.5GiB": 3 << 29,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "GiB", "-2", "x", "9999999999999TiB", "1PiB"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseAge(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"90s": 90 * time.Second, "12h": 12 * time.Hour, "7d": 7 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "-1": -1, "0": 0,
	} {
		if got, err := parseAge(in); err != nil || got != want {
			t.Errorf("parseAge(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "7", "-5m", "1.5d", "d", "99999999999999w"} {
		if got, err := parseAge(in); err == nil {
			t.Errorf("parseAge(%q) = %v, want an error", in, got)
		}
	}
}

func TestRetentionFlags(t *testing.T) {
	got, err := retentionFlags{time: "7d", size: "1GiB", quota: "10MiB", quotaPolicy: "consumer_backlog_eviction", ttl: "1h"}.policy()
	want := client.RetentionPolicy{RetentionTimeMs: 7 * 24 * 3600 * 1000, RetentionBytes: 1 << 30, BacklogQuotaBytes: 10 << 20,
		BacklogQuotaPolicy: client.ConsumerBacklogEviction, MessageTTLMs: 3600 * 1000}
	if err != nil || got != want {
		t.Fatalf("policy %+v, %v; want %+v", got, err, want)
	}
	if got, err := (retentionFlags{quotaPolicy: "producer_exception"}).policy(); err != nil || got != (client.RetentionPolicy{}) {
		t.Fatalf("no flags: %+v, %v", got, err)
	}
	for _, f := range []retentionFlags{
		{quotaPolicy: "drop"}, {quotaPolicy: "producer_exception", quota: "-1"}, {quotaPolicy: "producer_exception", ttl: "-1"},
		{quotaPolicy: "producer_exception", time: "soon"},
	} {
		if _, err := f.policy(); err == nil {
			t.Errorf("%+v accepted", f)
		}
	}
}

func TestCursorPosition(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		to           string
		partition    int
		partitionSet bool
		want         string
	}{
		{"earliest", 0, false, "earliest"},
		{"LATEST", 0, false, "latest"},
		{"2h", 0, false, "published at or after 2026-01-02T13:04:05Z"},
		{"7d", 0, false, "published at or after 2025-12-26T15:04:05Z"},
		{"2025-12-31T23:00:00+01:00", 0, false, "published at or after 2025-12-31T22:00:00Z"},
		{"17", 3, true, "offset 17 of partition 3"},
	} {
		got, err := cursorPosition(tc.to, tc.partition, tc.partitionSet, now)
		if err != nil || got.String() != tc.want {
			t.Errorf("--to %s: %v, %v; want %s", tc.to, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		to           string
		partition    int
		partitionSet bool
	}{{"17", 0, false}, {"earliest", 1, true}, {"17", -1, true}, {"soon", 0, false}, {"-1", 0, false}, {"0s", 0, false}} {
		if got, err := cursorPosition(tc.to, tc.partition, tc.partitionSet, now); err == nil {
			t.Errorf("--to %s --partition %d (set %v): %v, want an error", tc.to, tc.partition, tc.partitionSet, got)
		}
	}
}
