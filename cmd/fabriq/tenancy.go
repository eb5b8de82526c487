package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fabriq-io/fabriq/client"
)

func (a *app) tenantCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Create, list and delete tenants",
		Long: `A tenant owns fabrics, and fabrics hold streams. The tenant public, with
its fabric public/default, exists from the start: a short stream name such
as orders is persistent://public/default/orders.`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "create TENANT",
		Short:   "Create a tenant",
		Example: "  fabriq tenant create acme",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(c *client.Client) error {
				if err := c.CreateTenant(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "created tenant %s\n", args[0])
				return nil
			})
		},
	}, &cobra.Command{
		Use:   "list",
		Short: "List the tenants, one per line",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(c *client.Client) error {
				tenants, err := c.ListTenants(cmd.Context())
				if err != nil {
					return err
				}
				for _, t := range tenants {
					fmt.Fprintln(a.stdout, t)
				}
				return nil
			})
		},
	}, &cobra.Command{
		Use:   "delete TENANT",
		Short: "Delete a tenant that has no fabric left",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(c *client.Client) error {
				if err := c.DeleteTenant(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "deleted tenant %s\n", args[0])
				return nil
			})
		},
	})
	return cmd
}

func (a *app) fabricCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fabric",
		Short: "Create, list, describe and delete fabrics",
		Long: `A fabric (a geofabric) is a tenant's set of regions and the home of its
streams: TENANT/FABRIC holds persistent://TENANT/FABRIC/STREAM. It also
gives the streams created in it their defaults: partitions, replicas and
retention, taken by stream create when its flags leave them out.`,
	}
	cmd.AddCommand(a.fabricCreateCommand(), &cobra.Command{
		Use:   "list TENANT",
		Short: "List a tenant's fabrics, one per line",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(c *client.Client) error {
				fabrics, err := c.ListFabrics(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				for _, f := range fabrics {
					fmt.Fprintln(a.stdout, f.Fabric)
				}
				return nil
			})
		},
	}, a.fabricDescribeCommand(), a.fabricRegionsCommand(), &cobra.Command{
		Use:   "delete TENANT/FABRIC",
		Short: "Delete a fabric that has no stream left",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(c *client.Client) error {
				if err := c.DeleteFabric(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "deleted fabric %s\n", args[0])
				return nil
			})
		},
	})
	return cmd
}

func (a *app) fabricCreateCommand() *cobra.Command {
	var regions []string
	var opts client.FabricOptions
	var rf retentionFlags
	create := &cobra.Command{
		Use:   "create TENANT/FABRIC",
		Short: "Create a fabric of an existing tenant",
		Long: `Create a fabric of an existing tenant. --regions lists the regions its
streams may use (the --region labels nodes announce); none is every region.
--partitions, --replicas and the retention flags (as stream create takes
them) are the defaults of the streams created in it.`,
		Example: `  fabriq fabric create acme/eu --regions eu-west,eu-central --replicas 3
  fabriq fabric create acme/audit --retention-time 30d --retention-size -1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Regions = regions
			if rf.changed(cmd) {
				policy, err := rf.policy()
				if err != nil {
					return err
				}
				opts.Retention = &policy
			}
			return a.withClient(func(c *client.Client) error {
				if err := c.CreateFabric(cmd.Context(), args[0], opts); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "created fabric %s\n", args[0])
				return nil
			})
		},
	}
	create.Flags().StringSliceVar(&regions, "regions", nil, "regions the fabric's streams may use, comma-separated (default every region)")
	create.Flags().IntVarP(&opts.Partitions, "partitions", "p", 0, "default partitions of its streams (0: 1)")
	create.Flags().IntVarP(&opts.Replicas, "replicas", "r", 0, "default replicas of its streams' partitions (0: 1)")
	rf.register(create)
	return create
}

func (a *app) fabricDescribeCommand() *cobra.Command {
	var asJSON bool
	describe := &cobra.Command{
		Use:   "describe TENANT/FABRIC",
		Short: "Describe a fabric: its regions, stream defaults and streams",
		Long: `Describe a fabric. With --json the output is one object:
{"fabric": "TENANT/FABRIC", "regions": [...], "streams": N,
 "defaults": {"partitions": N, "replicas": N, "retention": {...}}}
where defaults left to the cluster are missing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(c *client.Client) error {
				info, err := c.DescribeFabric(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(a.stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(info)
				}
				regions := "every region"
				if len(info.Regions) > 0 {
					regions = strings.Join(info.Regions, ", ")
				}
				fmt.Fprintf(a.stdout, "fabric %s\n  regions: %s\n  streams: %d\n", info.Fabric, regions, info.Streams)
				fmt.Fprintf(a.stdout, "  default partitions: %d, replicas: %d\n", max(info.Defaults.Partitions, 1), max(info.Defaults.Replicas, 1))
				if r := info.Defaults.Retention; r != nil {
					fmt.Fprintf(a.stdout, "  default retention: %s\n", describeRetention(*r))
				}
				return nil
			})
		},
	}
	describe.Flags().BoolVar(&asJSON, "json", false, "print the description as JSON")
	return describe
}

func (a *app) fabricRegionsCommand() *cobra.Command {
	var regions []string
	cmd := &cobra.Command{
		Use:   "set-regions TENANT/FABRIC --regions a,b",
		Short: "Replace a fabric's regions",
		Long: `Replace the regions a fabric's streams may use (--regions none: every
region). Adding regions always works. A change that would leave a stream of
the fabric with a replica, a local region or a leader region outside the
new regions is refused, naming the stream: nothing is moved or deleted
silently; move or delete such streams first.`,
		Example: "  fabriq fabric set-regions acme/eu --regions eu-west,eu-central,eu-north",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(regions) == 1 && regions[0] == "none" {
				regions = nil
			}
			return a.withClient(func(c *client.Client) error {
				if err := c.SetFabricRegions(cmd.Context(), args[0], regions); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "fabric %s: regions %s\n", args[0], orEvery(regions))
				return nil
			})
		},
	}
	cmd.Flags().StringSliceVar(&regions, "regions", nil, "the fabric's regions, comma-separated (none: every region)")
	_ = cmd.MarkFlagRequired("regions")
	return cmd
}

// orEvery names a list of regions, or says every region.
func orEvery(regions []string) string {
	if len(regions) == 0 {
		return "every region"
	}
	return strings.Join(regions, ", ")
}
