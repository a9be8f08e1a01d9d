package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The operator's OAuth commands: approvers (who may approve MCP clients on
// the consent page) and the grants and clients the hub's authorization
// server holds (docs/oauth.md).

func init() {
	Register(&Command{
		Name:     "hub approver add",
		Synopsis: "NAME --project P [--project P2]... [--max-scope read|write] [--json]",
		Summary:  "add a person who may approve MCP clients for projects; prints their one-time login link",
		Help: `The link (valid 15 minutes, usable once) signs the approver's browser in
for 12 hours; send it to them privately. The admin token is never typed into a
browser. A new link: ` + "`roomrelay hub approver login-link ID`" + `.`,
		Setup: setupApproverAdd,
	})
	Register(&Command{Name: "hub approver list", Synopsis: "[--json]", Summary: "list approvers: id, name, projects, max scope", Setup: setupApproverList})
	Register(&Command{Name: "hub approver remove", Synopsis: "ID", Summary: "remove an approver: their sessions end at once (grants they approved stay until revoked)", Setup: setupApproverRemove})
	Register(&Command{Name: "hub approver login-link", Synopsis: "ID [--json]", Summary: "issue a new one-time login link for an approver", Setup: setupApproverLink})
	Register(&Command{Name: "hub oauth grants", Synopsis: "[--project P] [--json]", Summary: "list OAuth grants: client, project, scope, device, who approved, last use", Setup: setupOAuthGrants})
	Register(&Command{Name: "hub oauth revoke", Synopsis: "GRANT", Summary: "revoke an OAuth grant: its tokens stop working on every hub node at once", Setup: setupOAuthRevoke})
	Register(&Command{Name: "hub oauth clients", Synopsis: "[--json]", Summary: "list registered OAuth clients (self-registered names are unverified)", Setup: setupOAuthClients})
	Register(&Command{Name: "hub oauth forget-client", Synopsis: "CLIENT", Summary: "delete a client registration and revoke its grants", Setup: setupOAuthForget})
}

// repeated is a repeatable string flag.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func printLogin(e *Env, l *hubapi.ApproverLogin, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(e.Stdout).Encode(l)
	}
	fmt.Fprintln(e.Stdout, l.LoginURL)
	fmt.Fprintf(e.Stderr, "approver %s (%s) for %s, up to %s; the link works once, until %s: send it to them privately.\n",
		cell(l.Approver.ID), cell(l.Approver.Name), cell(strings.Join(l.Approver.Projects, ", ")), l.Approver.MaxScope, l.ExpiresAt.Local().Format(time.DateTime))
	return nil
}

func setupApproverAdd(fs *flag.FlagSet, e *Env) Runner {
	c := adminClientFlags(fs, e)
	var projects repeated
	fs.Var(&projects, "project", "a project `id` the approver may grant (repeatable; at least one)")
	maxScope := fs.String("max-scope", hubapi.ScopeWrite, "the widest access they may grant: read or write")
	asJSON := fs.Bool("json", false, "print JSON (the link is in login_url)")
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 || len(projects) == 0 {
			return usagef("want NAME and at least one --project P")
		}
		if *maxScope != hubapi.ScopeRead && *maxScope != hubapi.ScopeWrite {
			return usagef("--max-scope is read or write")
		}
		cl, err := c()
		if err != nil {
			return err
		}
		l, err := cl.AddApprover(ctx, hubapi.ApproverRequest{Name: args[0], Projects: projects, MaxScope: *maxScope})
		if err != nil {
			return hubCallErr(err)
		}
		return printLogin(e, l, *asJSON)
	}
}

func setupApproverLink(fs *flag.FlagSet, e *Env) Runner {
	asJSON := fs.Bool("json", false, "print JSON")
	return adminOne(fs, e, "want exactly one approver id (see `roomrelay hub approver list`)", func(ctx context.Context, cl *hubclient.Client, id string) error {
		l, err := cl.ApproverLoginLink(ctx, id)
		if err != nil {
			return hubCallErr(err)
		}
		return printLogin(e, l, *asJSON)
	})
}

func setupApproverList(fs *flag.FlagSet, e *Env) Runner {
	return adminList[hubapi.Approver]{
		fetch:  func(ctx context.Context, cl *hubclient.Client) ([]hubapi.Approver, error) { return cl.Approvers(ctx) },
		body:   func(as []hubapi.Approver) any { return hubapi.ApproverList{Approvers: as} },
		empty:  "no approvers; add one with `roomrelay hub approver add NAME --project P`",
		header: []string{"ID", "NAME", "PROJECTS", "MAX SCOPE", "CREATED"},
		row: func(a hubapi.Approver) []string {
			created := a.CreatedAt.Local().Format(time.DateTime)
			if a.Removed {
				created += " (removed)"
			}
			return []string{cell(a.ID), cell(a.Name), cell(strings.Join(a.Projects, ",")), a.MaxScope, created}
		},
	}.runner(fs, e)
}

func setupApproverRemove(fs *flag.FlagSet, e *Env) Runner {
	return adminOne(fs, e, "want exactly one approver id (see `roomrelay hub approver list`)", func(ctx context.Context, cl *hubclient.Client, id string) error {
		a, err := cl.RemoveApprover(ctx, id)
		if err != nil {
			return hubCallErr(err)
		}
		fmt.Fprintf(e.Stdout, "removed approver %s (%s); grants they approved stay: `roomrelay hub oauth grants`\n", cell(a.ID), cell(a.Name))
		return nil
	})
}

func setupOAuthGrants(fs *flag.FlagSet, e *Env) Runner {
	project := fs.String("project", "", "only this project's grants")
	return adminList[hubapi.OAuthGrant]{
		fetch: func(ctx context.Context, cl *hubclient.Client) ([]hubapi.OAuthGrant, error) {
			return cl.OAuthGrants(ctx, *project)
		},
		body:   func(gs []hubapi.OAuthGrant) any { return hubapi.OAuthGrantList{Grants: gs} },
		empty:  "no OAuth grants",
		header: []string{"GRANT", "CLIENT", "PROJECT", "SCOPE", "DEVICE", "APPROVED", "LAST USED"},
		row: func(g hubapi.OAuthGrant) []string {
			dev := g.Device
			if dev == "" {
				dev = "-"
			}
			used := g.LastUsed.Local().Format(time.DateTime)
			if g.Revoked {
				used += " (revoked)"
			}
			return []string{cell(g.ID), cell(g.ClientName) + " (unverified)", cell(g.Project), g.Scope,
				cell(dev), g.ApprovedVia + " by " + cell(g.ApprovedBy), used}
		},
	}.runner(fs, e)
}

func setupOAuthRevoke(fs *flag.FlagSet, e *Env) Runner {
	return adminOne(fs, e, "want exactly one grant id (see `roomrelay hub oauth grants`)", func(ctx context.Context, cl *hubclient.Client, id string) error {
		g, err := cl.RevokeOAuthGrant(ctx, id)
		if err != nil {
			return hubCallErr(err)
		}
		fmt.Fprintf(e.Stdout, "revoked OAuth grant %s (%s, project %s)\n", cell(g.ID), cell(g.ClientName), cell(g.Project))
		return nil
	})
}

func setupOAuthClients(fs *flag.FlagSet, e *Env) Runner {
	return adminList[hubapi.OAuthClient]{
		fetch: func(ctx context.Context, cl *hubclient.Client) ([]hubapi.OAuthClient, error) {
			return cl.OAuthClients(ctx)
		},
		body:   func(cs []hubapi.OAuthClient) any { return hubapi.OAuthClientList{Clients: cs} },
		empty:  "no registered OAuth clients",
		header: []string{"CLIENT", "NAME", "REDIRECTS", "REGISTERED"},
		row: func(c hubapi.OAuthClient) []string {
			return []string{cell(c.ID), cell(c.Name) + " (unverified)", cell(strings.Join(c.RedirectURIs, " ")), c.CreatedAt.Local().Format(time.DateTime)}
		},
	}.runner(fs, e)
}

func setupOAuthForget(fs *flag.FlagSet, e *Env) Runner {
	return adminOne(fs, e, "want exactly one client id (see `roomrelay hub oauth clients`)", func(ctx context.Context, cl *hubclient.Client, id string) error {
		n, err := cl.ForgetOAuthClient(ctx, id)
		if err != nil {
			return hubCallErr(err)
		}
		fmt.Fprintf(e.Stdout, "forgot OAuth client %s and revoked %d grant(s)\n", cell(id), n)
		return nil
	})
}
