package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fabriq-io/fabriq/client"
)

func (a *app) subscriptionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "subscription",
		Short: "List subscriptions, reset their cursors, skip their backlogs, delete them",
		Long: `Operate on a stream's subscriptions without a consumer. A token needs the
consume action on the stream's fabric: what a consumer may do to its own
subscription (seek, unsubscribe).`,
	}

	list := &cobra.Command{
		Use:   "list STREAM",
		Short: "List a stream's subscriptions, one per line",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(c *client.Client) error {
				subs, err := c.ListSubscriptions(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				for _, s := range subs {
					fmt.Fprintln(a.stdout, s)
				}
				return nil
			})
		},
	}

	var to string
	var partition int
	reset := &cobra.Command{
		Use:   "reset STREAM SUBSCRIPTION --to POSITION",
		Short: "Move a subscription's cursor",
		Long: `Move a subscription's cursor on every partition: the messages after the
position become its backlog, those before it acknowledged, and its attached
consumers restart from there. --to is one of:
  earliest      the first message each partition keeps
  latest        the end of each partition (as subscription skip)
  TIME          the first message published at or after TIME (RFC 3339,
                2026-01-02T15:04:05Z), or this long ago (10m, 2h, 7d)
  OFFSET        an offset, with --partition N: on that partition alone`,
		Example: `  fabriq subscription reset persistent://acme/prod/orders billing --to earliest
  fabriq subscription reset persistent://acme/prod/orders billing --to 2h
  fabriq subscription reset persistent://acme/prod/orders billing --to 1200 --partition 3`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			pos, err := cursorPosition(to, partition, cmd.Flags().Changed("partition"), time.Now())
			if err != nil {
				return err
			}
			return a.withClient(func(c *client.Client) error {
				if err := c.ResetCursor(cmd.Context(), args[0], args[1], pos); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "moved %s of %s to %s\n", args[1], args[0], pos)
				return nil
			})
		},
	}
	reset.Flags().StringVar(&to, "to", "", "where to: earliest, latest, a time or an offset (see above)")
	reset.Flags().IntVar(&partition, "partition", 0, "the partition an offset is on")
	_ = reset.MarkFlagRequired("to")

	skip := &cobra.Command{
		Use:   "skip STREAM SUBSCRIPTION",
		Short: "Acknowledge a subscription's whole backlog",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(c *client.Client) error {
				if err := c.SkipBacklog(cmd.Context(), args[0], args[1]); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "skipped the backlog of %s on %s\n", args[1], args[0])
				return nil
			})
		},
	}

	var force bool
	del := &cobra.Command{
		Use:   "delete STREAM SUBSCRIPTION",
		Short: "Delete a subscription and its cursors",
		Long: `Delete a subscription and its cursors. It is refused while consumers are
attached, unless --force, which disconnects them: a consumer that subscribes
again starts a new subscription at its initial position.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(c *client.Client) error {
				if err := c.DeleteSubscription(cmd.Context(), args[0], args[1], force); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "deleted %s of %s\n", args[1], args[0])
				return nil
			})
		},
	}
	del.Flags().BoolVar(&force, "force", false, "delete even while consumers are attached, disconnecting them")

	cmd.AddCommand(list, reset, skip, del)
	return cmd
}

// cursorPosition parses subscription reset's --to; now anchors a
// duration.
func cursorPosition(to string, partition int, partitionSet bool, now time.Time) (client.CursorPosition, error) {
	if partitionSet && partition < 0 {
		return client.CursorPosition{}, fmt.Errorf("--partition %d: a partition is 0 or more", partition)
	}
	offset, oerr := strconv.ParseUint(to, 10, 64)
	switch {
	case oerr == nil && !partitionSet:
		return client.CursorPosition{}, fmt.Errorf("--to %s: an offset needs --partition", to)
	case oerr == nil:
		return client.CursorAtOffset(partition, offset), nil
	case partitionSet:
		return client.CursorPosition{}, fmt.Errorf("--partition goes with an offset, not --to %s", to)
	}
	switch strings.ToLower(to) {
	case "earliest":
		return client.CursorAtEarliest(), nil
	case "latest":
		return client.CursorAtLatest(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, to); err == nil {
		return client.CursorAtTime(t), nil
	}
	if d, err := parseAge(to); err == nil && d > 0 {
		return client.CursorAtTime(now.Add(-d)), nil
	}
	return client.CursorPosition{}, fmt.Errorf("--to %q: want earliest, latest, an RFC 3339 time, a duration ago (2h) or an offset with --partition", to)
}
