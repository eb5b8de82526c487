package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/golang-jwt/jwt/v5"

	"github.com/fabriq-io/fabriq/geofabric"
)

// Action is what a grant allows on its tenant or fabric.
type Action string

// The actions. Admin allows Produce and Consume as well.
const (
	Produce Action = "produce"
	Consume Action = "consume"
	Admin   Action = "admin"
)

// ParseActions reads a comma-separated list of actions ("produce,consume").
func ParseActions(s string) ([]Action, error) {
	var out []Action
	for _, f := range strings.Split(s, ",") {
		a := Action(strings.TrimSpace(f))
		switch a {
		case Produce, Consume, Admin:
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		case "":
		default:
			return nil, fmt.Errorf("auth: unknown action %q: the actions are produce, consume and admin", a)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("auth: no action given: the actions are produce, consume and admin")
	}
	return out, nil
}

// Grant allows Actions on a tenant's fabric, or on every fabric of the
// tenant when Fabric is empty.
type Grant struct {
	Tenant  string   `json:"tenant"`
	Fabric  string   `json:"fabric,omitempty"`
	Actions []Action `json:"actions"`
}

// covers reports whether the grant applies to tenant/fabric; an empty
// fabric asks about the tenant as a whole, which only a grant without a
// fabric covers.
func (g Grant) covers(tenant, fabric string) bool {
	return g.Tenant == tenant && (g.Fabric == "" || g.Fabric == fabric)
}

// allows reports whether the grant's actions include a.
func (g Grant) allows(a Action) bool {
	return slices.Contains(g.Actions, a) || slices.Contains(g.Actions, Admin)
}

// Claims are what a token says of its bearer.
type Claims struct {
	jwt.RegisteredClaims
	// Superuser may do everything: operators and nodes.
	Superuser bool `json:"superuser,omitempty"`
	// Grants are what a client that is not a superuser may do.
	Grants []Grant `json:"grants,omitempty"`
}

// Validate checks the claims' shape: a subject, and either the superuser
// role or grants of known actions on valid tenant and fabric names. The
// jwt parser calls it after checking the signature and the times.
func (c *Claims) Validate() error {
	if c.Subject == "" {
		return errors.New("the token names no subject")
	}
	if c.Superuser {
		if len(c.Grants) > 0 {
			return errors.New("a superuser token carries no grants")
		}
		return nil
	}
	if len(c.Grants) == 0 {
		return errors.New("the token grants nothing")
	}
	for _, g := range c.Grants {
		if err := checkGrant(g); err != nil {
			return err
		}
	}
	return nil
}

func checkGrant(g Grant) error {
	name := g.Tenant + "/" + g.Fabric
	if g.Fabric == "" {
		name = g.Tenant + "/x"
	}
	if _, _, err := geofabric.ParseFabric(name); err != nil {
		return fmt.Errorf("a grant on %q/%q: %w", g.Tenant, g.Fabric, err)
	}
	if len(g.Actions) == 0 {
		return fmt.Errorf("a grant on %s allows no action", name)
	}
	for _, a := range g.Actions {
		switch a {
		case Produce, Consume, Admin:
		default:
			return fmt.Errorf("a grant on %s: unknown action %q", name, a)
		}
	}
	return nil
}

// Allows reports whether the claims allow a on fabric of tenant. An empty
// fabric asks for the tenant as a whole (creating fabrics, listing them):
// only a grant without a fabric gives that.
func (c *Claims) Allows(a Action, tenant, fabric string) bool {
	if c == nil {
		return false
	}
	if c.Superuser {
		return true
	}
	for _, g := range c.Grants {
		if g.covers(tenant, fabric) && g.allows(a) && (fabric != "" || g.Fabric == "") {
			return true
		}
	}
	return false
}

// Reaches reports whether the claims allow anything at all on fabric of
// tenant, or, with an empty fabric, on any fabric of tenant: the
// condition to see its name in a listing.
func (c *Claims) Reaches(tenant, fabric string) bool {
	if c == nil {
		return false
	}
	if c.Superuser {
		return true
	}
	for _, g := range c.Grants {
		if g.Tenant == tenant && (fabric == "" || g.covers(tenant, fabric)) {
			return true
		}
	}
	return false
}
