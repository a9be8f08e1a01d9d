package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The client token commands: bearer tokens for MCP clients (Claude Code and
// others), one project and scope each.

func init() {
	Register(&Command{
		Name:     "hub token create",
		Synopsis: "--project P --scope read|write [--name N] [--json]",
		Summary:  "issue a client token for the MCP endpoint; it is printed once",
		Help: `A read token may call list_local_rooms, read_room, list_room_apps,
read_room_app_status and wait_for_review; a write token also the proposals
and smoke_run_room_app. Tokens of project P see only P's rooms. The hub
stores only a hash: copy the token now. Use it as
  claude mcp add --transport http roomrelay HUB/mcp --header "Authorization: Bearer TOKEN"`,
		Setup: setupHubTokenCreate,
	})

	Register(&Command{
		Name:     "hub token list",
		Synopsis: "[--json]",
		Summary:  "list client tokens: id, name, project, scope, created, last used (never the token)",
		Setup:    setupHubTokenList,
	})

	Register(&Command{
		Name:     "hub token revoke",
		Synopsis: "ID",
		Summary:  "revoke a client token: it stops working on every hub node at once",
		Setup:    setupHubTokenRevoke,
	})
}

// setupHubTokenCreate parses the flags of `roomrelay hub token create` and returns its runner.
func setupHubTokenCreate(fs *flag.FlagSet, e *Env) Runner {
	c := adminClientFlags(fs, e)
	project := fs.String("project", "", "project `id` the token reaches (required)")
	scope := fs.String("scope", "", "read or write (required; write implies read)")
	name := fs.String("name", "", "a `name` to recognise the token by in `hub token list`")
	asJSON := fs.Bool("json", false, "print JSON (the token is in the field token)")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 || *project == "" || (*scope != hubapi.ScopeRead && *scope != hubapi.ScopeWrite) {
			return usagef("want --project P and --scope read|write, and no arguments")
		}
		cl, err := c()
		if err != nil {
			return err
		}
		t, err := cl.CreateClientToken(ctx, *project, *scope, *name)
		if err != nil {
			return hubCallErr(err)
		}
		if *asJSON {
			return json.NewEncoder(e.Stdout).Encode(t)
		}
		fmt.Fprintln(e.Stdout, t.Token)
		// The hint names the token, never repeats it: stderr is what logs
		// and CI keep.
		fmt.Fprintf(e.Stderr, "client token %s (%s) for project %s, scope %s; printed above, only now.\nuse it: claude mcp add --transport http roomrelay %s/mcp --header \"Authorization: Bearer TOKEN\"\n",
			cell(t.ID), cell(t.Name), cell(t.Project), t.Scope, cl.BaseURL)
		return nil
	}
}

// setupHubTokenList parses the flags of `roomrelay hub token list` and returns its runner.
func setupHubTokenList(fs *flag.FlagSet, e *Env) Runner {
	return adminList[hubapi.ClientToken]{
		fetch: func(ctx context.Context, cl *hubclient.Client) ([]hubapi.ClientToken, error) {
			return cl.ClientTokens(ctx)
		},
		body:   func(ts []hubapi.ClientToken) any { return hubapi.ClientTokenList{Tokens: ts} },
		empty:  "no client tokens; create one with `roomrelay hub token create --project P --scope read`",
		header: []string{"ID", "NAME", "PROJECT", "SCOPE", "CREATED", "LAST USED"},
		row: func(t hubapi.ClientToken) []string {
			used := "never"
			if !t.LastUsed.IsZero() {
				used = t.LastUsed.Local().Format(time.DateTime)
			}
			if t.Revoked {
				used += " (revoked)"
			}
			return []string{cell(t.ID), cell(t.Name), cell(t.Project), t.Scope, t.CreatedAt.Local().Format(time.DateTime), used}
		},
	}.runner(fs, e)
}

// setupHubTokenRevoke parses the flags of `roomrelay hub token revoke` and returns its runner.
func setupHubTokenRevoke(fs *flag.FlagSet, e *Env) Runner {
	return adminOne(fs, e, "want exactly one token id (see `roomrelay hub token list`)", func(ctx context.Context, cl *hubclient.Client, id string) error {
		t, err := cl.RevokeClientToken(ctx, id)
		if err != nil {
			return hubCallErr(err)
		}
		fmt.Fprintf(e.Stdout, "revoked client token %s (%s, project %s)\n", t.ID, t.Name, t.Project)
		return nil
	})
}
