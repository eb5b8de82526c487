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
