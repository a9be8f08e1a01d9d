package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// `roomrelay oauth approve CODE`: the device's owner approves an MCP
// client's sign-in from the code its browser shows (docs/oauth.md). The
// grant reaches this device's rooms in one project only.

func init() {
	Register(&Command{
		Name:     "oauth approve",
		Synopsis: "CODE [--project P] [--write] [--deny] [--yes] [--json]",
		Summary:  "approve an MCP client's sign-in shown in your browser, for this device's rooms",
		Help: `The hub's consent page shows "roomrelay oauth approve CODE". This shows what
asks (the client's self-given name, where its browser goes back to, from which
address), then asks you to confirm. Approve only a code you see in your own
browser right now: someone who talks you into running another code gets
access to your rooms. The grant covers this device's rooms in one project
(--project when it is enrolled for several) and is read-only unless --write
(proposing apps; each proposal still needs your approval here). Without a
terminal, --yes confirms. --deny refuses the request.

Exit codes: 0 decided; 1 refused by the hub (unknown or expired code, a
project this device is not enrolled for); 3 not enrolled; 4 hub unreachable.`,
		Setup: setupOAuthApprove,
	})
}

func setupOAuthApprove(fs *flag.FlagSet, e *Env) Runner {
	paths := pathFlags(fs, e)
	project := fs.String("project", "", "the `project` to grant (default: this device's only project)")
	write := fs.Bool("write", false, "also allow proposing apps (each proposal still needs your approval here)")
	deny := fs.Bool("deny", false, "refuse the request")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("want exactly one CODE (as the consent page shows it, e.g. K7Q2-9XWM)")
		}
		if *deny && *write {
			return usagef("--deny and --write together make no sense")
		}
		p, err := paths()
		if err != nil {
			return err
		}
		cfg, err := device.LoadConfig(p)
		if err != nil {
			return err
		}
		req, err := device.OAuthRequest(ctx, p, cfg, args[0])
		if err != nil {
			return err
		}
		if !*asJSON || !*yes {
			w := e.Stderr
			if req.ClientVerified {
				fmt.Fprintf(w, "%s (as its metadata document %s says) asks to use this device's rooms.\n", cell(req.ClientName), cell(req.ClientID))
			} else {
				fmt.Fprintf(w, "%s (unverified: the name the client gave itself) asks to use this device's rooms.\n", cell(req.ClientName))
			}
			fmt.Fprintf(w, "  its browser returns to: %s\n", cell(req.RedirectHost))
			if req.RequestedFrom != "" {
				fmt.Fprintf(w, "  requested from:         %s %s\n", cell(req.RequestedFrom), cell(req.UserAgent))
			}
			scope := "read rooms"
			if *write {
				scope = "read rooms, and propose apps (each proposal still needs your approval here)"
			}
			fmt.Fprintf(w, "  access if approved:     %s\n", scope)
			fmt.Fprintf(w, "  this device's projects: %s\n", cell(strings.Join(req.Projects, ", ")))
			fmt.Fprintln(w, "Approve only a code you see in your own browser right now.")
		}
		if !*yes && !*deny {
			if !isTerminal(e.Stdin) {
				return usagef("without a terminal, pass --yes to approve (after reading the above) or --deny")
			}
			if _, ok := confirm(ctx, e, "Approve? [y/N] "); !ok {
				*deny = true
			}
		}
		d := hubapi.OAuthDecision{Approve: !*deny, Project: *project}
		if *write {
			d.Scope = hubapi.ScopeWrite
		}
		res, err := device.DecideOAuth(ctx, p, cfg, args[0], d)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(e.Stdout).Encode(res)
		}
		if !res.Approved {
			fmt.Fprintln(e.Stdout, "denied; the browser shows the client it was refused")
			return nil
		}
		fmt.Fprintf(e.Stdout, "approved: %s for project %s (%s), this device's rooms only; the browser continues by itself.\nrevoke: ask the hub's operator (`roomrelay hub oauth revoke`), or unenroll this device\n",
			cell(req.ClientName), cell(res.Project), res.Scope)
		return nil
	}
}
