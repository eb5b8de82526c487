package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"

	"github.com/fabriq-io/fabriq/auth"
)

func (a *app) tokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make tokens for a cluster with authentication on",
	}
	cmd.AddCommand(a.tokenCreateCommand())
	return cmd
}

func (a *app) tokenCreateCommand() *cobra.Command {
	var (
		secretFile, keyFile     string
		subject, tenant, fabric string
		actions                 string
		expires                 time.Duration
		superuser               bool
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Print a signed token (JWT) for a client or an operator",
		Long: `Print a signed token (JWT) for a client or an operator.

Sign with the cluster's HMAC secret (--secret-file, the file given to
fabriqd --auth-secret-file) or with the private key whose public key the
nodes hold (--private-key-file; fabriqd --auth-public-key-file). A client's
token grants --actions on --tenant, on one --fabric of it or, without
--fabric, on all of them; admin allows produce and consume too, and the
management of the tenant's fabrics and streams. --superuser makes an
operator's token instead: everything, on every tenant, and the cluster's
own operations (tenants, cluster status).

Nothing is sent to the cluster: the token is made here. Keep the secret
and the private key off the clients' machines.`,
		Example: `  fabriq token create --secret-file secret --subject billing --tenant acme --fabric billing --actions produce,consume
  fabriq token create --secret-file secret --subject ops --superuser --expires 8h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			signer, err := auth.LoadSigner(secretFile, keyFile)
			if err != nil {
				return fmt.Errorf("--secret-file, --private-key-file: %w", err)
			}
			if subject == "" {
				return errors.New("--subject is required: it names the client in the nodes' logs")
			}
			c := auth.Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: subject}}
			switch {
			case superuser && (tenant != "" || fabric != "" || cmd.Flags().Changed("actions")):
				return errors.New("--superuser takes no --tenant, --fabric or --actions: it allows everything")
			case superuser:
				c.Superuser = true
			case tenant == "":
				return errors.New("--tenant is required (or --superuser for an operator's token)")
			default:
				acts, err := auth.ParseActions(actions)
				if err != nil {
					return fmt.Errorf("--actions: %w", err)
				}
				c.Grants = []auth.Grant{{Tenant: tenant, Fabric: fabric, Actions: acts}}
			}
			if expires < 0 {
				return errors.New("--expires must not be negative (0: the token never expires)")
			}
			tok, err := signer.Sign(c, expires)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&secretFile, "secret-file", "", "the cluster's HMAC secret (fabriqd --auth-secret-file)")
	f.StringVar(&keyFile, "private-key-file", "", "a PEM private key (RSA, ECDSA or Ed25519) whose public key the nodes hold (fabriqd --auth-public-key-file)")
	f.StringVar(&subject, "subject", "", "who the token is for; it names the client in the nodes' logs")
	f.StringVar(&tenant, "tenant", "", "the tenant the token grants actions on")
	f.StringVar(&fabric, "fabric", "", "one fabric of the tenant (default: every fabric of it)")
	f.StringVar(&actions, "actions", "produce,consume", "what the token allows: produce, consume, admin, comma-separated")
	f.DurationVar(&expires, "expires", 24*time.Hour, "how long the token is valid (0: for ever)")
	f.BoolVar(&superuser, "superuser", false, "make an operator's token: everything, everywhere")
	return cmd
}
