package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fabriq-io/fabriq/client"
)

// consumed is the JSON line printed for each message.
type consumed struct {
	ID              string `json:"id"`
	Stream          string `json:"stream"`
	Partition       int    `json:"partition"`
	Offset          uint64 `json:"offset"`
	Key             string `json:"key"`
	Payload         string `json:"payload"`
	RedeliveryCount uint32 `json:"redelivery_count"`
	Consumer        string `json:"consumer"`
}

func parseType(s string) (client.SubscriptionType, error) {
	switch s {
	case "exclusive":
		return client.Exclusive, nil
	case "shared":
		return client.Shared, nil
	case "failover":
		return client.Failover, nil
	case "key_shared":
		return client.KeyShared, nil
	}
	return 0, fmt.Errorf("-t must be exclusive, shared, failover or key_shared, not %q", s)
}

func parsePosition(s string) (client.InitialPosition, error) {
	switch s {
	case "latest":
		return client.Latest, nil
	case "earliest":
		return client.Earliest, nil
	}
	return 0, fmt.Errorf("--initial-position must be earliest or latest, not %q", s)
}

func (a *app) consumeCommand() *cobra.Command {
	var sub, typ, name, position, ranges, pattern string
	var count, priority int
	var asJSON, outOfOrder bool
	cmd := &cobra.Command{
		Use:   "consume STREAM[,STREAM...] | --pattern REGEX",
		Short: "Receive messages from a stream's subscription",
		Long: `Receive messages through a subscription and acknowledge each one after
printing it. A comma-separated list reads several streams (of any fabrics)
through one subscription; --pattern reads every stream of one fabric whose
full name matches a Go regular expression, whose tenant and fabric must be
literal (persistent://acme/eu/finance-.*), including streams created while
it runs, from their first message. With --json each message is one line:
{"id","stream","partition","offset","key","payload","redelivery_count","consumer"}
written and flushed before the message is acknowledged. Stops after -n
messages (0: until interrupted) or on SIGINT/SIGTERM, closing cleanly.`,
		Example: `  fabriq consume persistent://acme/prod/orders -s audit -n 10 --initial-position earliest --json
  fabriq consume acme/eu/orders,acme/us/orders -s audit
  fabriq consume --pattern 'persistent://acme/eu/finance-.*' -s ledger -t shared`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if sub == "" {
				return errors.New("-s SUBSCRIPTION is required")
			}
			if (len(args) == 1) == (pattern != "") {
				return errors.New("give a stream (or a comma-separated list of streams), or --pattern, not both")
			}
			t, err := parseType(typ)
			if err != nil {
				return err
			}
			pos, err := parsePosition(position)
			if err != nil {
				return err
			}
			if count < 0 {
				return fmt.Errorf("-n must not be negative, not %d", count)
			}
			var which client.MultiOptions
			if pattern != "" {
				which.Pattern = pattern
			} else if strings.Contains(args[0], ",") {
				which.Streams = strings.Split(args[0], ",")
			}
			opts := client.ConsumerOptions{
				Subscription:                sub,
				Type:                        t,
				Name:                        name,
				SubscriptionInitialPosition: pos,
				PriorityLevel:               priority,
			}
			if ranges != "" || outOfOrder {
				if t != client.KeyShared {
					return errors.New("--hash-ranges and --allow-out-of-order are for -t key_shared")
				}
				policy := &client.KeySharedPolicy{AllowOutOfOrderDelivery: outOfOrder}
				if ranges != "" {
					rs, err := parseRanges(ranges)
					if err != nil {
						return err
					}
					policy.Mode, policy.Ranges = client.KeySharedSticky, rs
				}
				opts.KeySharedPolicy = policy
			}
			if which.Pattern == "" && which.Streams == nil {
				opts.Stream = args[0]
			}
			return a.consume(cmd.Context(), which, opts, count, asJSON)
		},
	}
	cmd.Flags().StringVarP(&sub, "subscription", "s", "", "subscription name (required)")
	cmd.Flags().StringVar(&pattern, "pattern", "", "read every stream of one fabric whose full name matches this Go regular expression, streams created later included")
	cmd.Flags().StringVarP(&typ, "type", "t", "exclusive", "subscription type: exclusive, shared, failover, key_shared")
	cmd.Flags().StringVar(&name, "name", "", "consumer name (default: generated)")
	cmd.Flags().IntVarP(&count, "num", "n", 0, "stop after this many messages (0: until interrupted)")
	cmd.Flags().StringVar(&position, "initial-position", "latest", "where a new subscription starts: earliest or latest")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON line per message")
	cmd.Flags().IntVar(&priority, "priority", 0, "priority level for shared and failover (0 is served first)")
	cmd.Flags().StringVar(&ranges, "hash-ranges", "", "key_shared sticky: the key hash ranges this consumer takes, START-END[,START-END...] within 0-65535")
	cmd.Flags().BoolVar(&outOfOrder, "allow-out-of-order", false, "key_shared: let a key move to a new consumer before the old one acked it")
	return cmd
}

// parseRanges parses START-END[,START-END...].
func parseRanges(s string) ([]client.HashRange, error) {
	var out []client.HashRange
	for _, part := range strings.Split(s, ",") {
		var r client.HashRange
		if _, err := fmt.Sscanf(part, "%d-%d", &r.Start, &r.End); err != nil || r.Start < 0 || r.End > 65535 || r.Start > r.End {
			return nil, fmt.Errorf("--hash-ranges: %q is not START-END within 0-65535", part)
		}
		out = append(out, r)
	}
	return out, nil
}

// receiver is a consumer of one stream or of several.
type receiver interface {
	Receive(ctx context.Context) (*client.Message, error)
	Ack(ctx context.Context, m *client.Message) error
	Name() string
	Close() error
}

func (a *app) consume(ctx context.Context, which client.MultiOptions, opts client.ConsumerOptions, count int, asJSON bool) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	defer c.Close()
	var cons receiver
	if opts.Stream != "" {
		cons, err = c.Subscribe(ctx, opts)
	} else {
		cons, err = c.SubscribeMulti(ctx, which, opts)
	}
	if err != nil {
		return err
	}
	defer cons.Close()
	out := bufio.NewWriter(a.stdout)
	enc := json.NewEncoder(out)
	progress := newProgress(a.stderr, "received")
	for n := 0; count == 0 || n < count; n++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				progress.done(n)
				return nil // interrupted: a clean stop
			}
			return err
		}
		if asJSON {
			enc.Encode(consumed{
				ID: m.ID.String(), Stream: m.ID.Stream, Partition: m.ID.Partition, Offset: m.ID.Offset,
				Key: m.Key, Payload: string(m.Payload), RedeliveryCount: m.RedeliveryCount, Consumer: cons.Name(),
			})
		} else {
			fmt.Fprintf(out, "%s key=%q %s\n", m.ID, m.Key, m.Payload)
		}
		if err := out.Flush(); err != nil {
			return err
		}
		if err := cons.Ack(ctx, m); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("ack %s: %w", m.ID, err)
		}
		progress.update(n + 1)
	}
	progress.done(count)
	return nil
}
