package broker

import (
	"testing"

	"github.com/fabriq-io/fabriq/transport"
)

func TestValidRetention(t *testing.T) {
	for _, r := range []transport.RetentionPolicy{
		{RetentionTimeMs: -2}, {RetentionBytes: -5}, {BacklogQuotaBytes: -1}, {BacklogQuotaPolicy: 7}, {MessageTTLMs: -1},
	} {
		if err := validRetention(r); err == nil {
			t.Errorf("%+v accepted", r)
		}
	}
	for _, r := range []transport.RetentionPolicy{
		{}, {RetentionTimeMs: -1, RetentionBytes: -1}, {RetentionTimeMs: 1000, RetentionBytes: 1 << 30, BacklogQuotaBytes: 1 << 20,
			BacklogQuotaPolicy: transport.ConsumerBacklogEviction, MessageTTLMs: 5},
	} {
		if err := validRetention(r); err != nil {
			t.Errorf("%+v refused: %v", r, err)
		}
	}
}
