package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
)

func policyPath(p device.Paths) string { return filepath.Join(p.Config, daemon.PolicyFile) }

// policyFlags adds --home and returns a loader of the owner's policy file
// (a missing file is the deny-all policy).
func policyFlags(fs *flag.FlagSet, e *Env) func() (device.Paths, *allowlist.Policy, error) {
	paths := pathFlags(fs, e)
	return func() (device.Paths, *allowlist.Policy, error) {
		p, err := paths()
		if err != nil {
			return p, nil, err
		}
		pol, err := allowlist.Load(policyPath(p))
		return p, pol, err
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func init() {
	Register(&Command{
		Name:     "enable",
		Synopsis: "PROJECT [--allow CMD,...] [--deny CMD,...] [--only CMD,...] [--rooms ID,...|*]",
		Summary:  "serve a project on this device, with the commands you allow",
		Help: `Writes the local policy file and prints the project's resulting commands and
what changed. A project enabled for the first time gets the three read tools
(read_room, list_room_apps, read_room_app_status); enabling it again keeps
what it had. --allow adds commands, --deny removes them, --only replaces the
list; proposals need --allow propose_room_snippet_app,... explicitly.
--rooms replaces the rooms the project's commands may touch (default, and
with --rooms '*': every room; other rooms answer not_found). A running agent
picks the change up within a second, without restart, and tells the hub.
Known commands: ` + strings.Join(relay.CommandNames(), ", ") + `.`,
		Setup: setupEnable,
	})
	Register(&Command{
		Name:     "disable",
		Synopsis: "PROJECT",
		Summary:  "stop serving a project on this device",
		Setup:    setupDisable,
	})
	Register(&Command{
		Name:     "policy show",
		Synopsis: "[--json]",
		Summary:  "show what this device serves: projects, commands, rooms, rate limits",
		Setup:    setupPolicyShow,
	})
}

// setupEnable parses the flags of `roomrelay enable` and returns its runner.
func setupEnable(fs *flag.FlagSet, e *Env) Runner {
	load := policyFlags(fs, e)
	allow := fs.String("allow", "", "comma-separated `commands` to add")
	deny := fs.String("deny", "", "comma-separated `commands` to remove")
	only := fs.String("only", "", "comma-separated `commands`: the whole list, replacing it")
	roomList := fs.String("rooms", "", "comma-separated room `ids` to expose, or * for all (default: unchanged; all for a new project)")
	return func(ctx context.Context, args []string) error {
		args, err := interleavedFlags(fs, args)
		if err != nil {
			return err
		}
		if len(args) != 1 {
			return usagef("want one project id")
		}
		p, pol, err := load()
		if err != nil {
			return err
		}
		project := args[0]
		req := enableRequest(*allow, *deny, *only, *roomList)
		before, existed, err := pol.ApplyEnable(project, req)
		if err != nil {
			return exitErr(ExitUsage, err)
		}
		if c := liveAgent(ctx, e, p); c != nil {
			// The running agent writes the file (one writer) and reloads it.
			defer c.Close()
			if _, err := c.Do(ctx, "POST", "projects/"+project+"/enable", req, nil, nil); err != nil {
				return apiFailure("enabled", err)
			}
			if pol, err = allowlist.Load(policyPath(p)); err != nil {
				return err
			}
		} else {
			if err := p.MkdirAll(); err != nil {
				return err
			}
			if err := pol.Save(policyPath(p)); err != nil {
				return err
			}
		}
		info, _ := pol.Project(project)
		roomsText := "all rooms"
		if len(info.Rooms) > 0 {
			roomsText = "rooms " + strings.Join(info.Rooms, ", ")
		}
		fmt.Fprintf(e.Stdout, "enabled %s: %s; %s; rate %s\n", project, strings.Join(info.Commands, ", "), roomsText, info.Rate)
		if existed {
			added, removed := diffLists(before.Commands, info.Commands)
			var ch []string
			if len(added) > 0 {
				ch = append(ch, "added "+strings.Join(added, ", "))
			}
			if len(removed) > 0 {
				ch = append(ch, "removed "+strings.Join(removed, ", "))
			}
			if !before.Enabled {
				ch = append([]string{"was disabled"}, ch...)
			}
			if len(ch) == 0 {
				ch = []string{"commands unchanged"}
			}
			fmt.Fprintf(e.Stdout, "changed: %s\n", strings.Join(ch, "; "))
		}
		if cfg, err := device.LoadConfig(p); err == nil && !containsStr(cfg.Projects, project) {
			fmt.Fprintf(e.Stderr, "note: the hub has not enrolled this device for %s yet; it is served once both hold (`roomrelay enroll` with a code for %s)\n", project, project)
		}
		return nil
	}
}

// setupDisable parses the flags of `roomrelay disable` and returns its runner.
func setupDisable(fs *flag.FlagSet, e *Env) Runner {
	load := policyFlags(fs, e)
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("want one project id")
		}
		p, pol, err := load()
		if err != nil {
			return err
		}
		if err := pol.Disable(args[0]); err != nil {
			return exitErr(ExitFailure, err)
		}
		if c := liveAgent(ctx, e, p); c != nil {
			defer c.Close()
			if _, err := c.Do(ctx, "POST", "projects/"+args[0]+"/disable", nil, nil, nil); err != nil {
				return apiFailure("disabled", err)
			}
		} else if err := pol.Save(policyPath(p)); err != nil {
			return err
		}
		fmt.Fprintf(e.Stdout, "disabled %s: every command for it now answers project_not_enabled\n", args[0])
		return nil
	}
}

// setupPolicyShow parses the flags of `roomrelay policy show` and returns its runner.
func setupPolicyShow(fs *flag.FlagSet, e *Env) Runner {
	load := policyFlags(fs, e)
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		p, pol, err := load()
		if err != nil {
			return err
		}
		if *asJSON {
			ps := pol.Projects()
			if ps == nil {
				ps = []allowlist.ProjectInfo{}
			}
			return json.NewEncoder(e.Stdout).Encode(map[string]any{"file": policyPath(p), "in_flight": pol.InFlight(), "notifications": pol.Notifications(),
				"provider": pol.Provider(), "projects": ps})
		}
		fmt.Fprintf(e.Stdout, "# %s\n# room provider: %s (roomrelay provider app|builtin)\n", policyPath(p), pol.Provider())
		if len(pol.Projects()) == 0 {
			fmt.Fprintln(e.Stdout, "# no project enabled: every command is denied (roomrelay enable PROJECT)")
			return nil
		}
		_, err = e.Stdout.Write(pol.Marshal())
		return err
	}
}

// enableRequest is enable's flags as the rule set in allowlist takes them:
// --rooms ” keeps the rooms, '*' is every room, else a comma list.
func enableRequest(allow, deny, only, rooms string) allowlist.EnableRequest {
	req := allowlist.EnableRequest{Allow: splitList(allow), Deny: splitList(deny), Only: splitList(only)}
	if rooms != "" {
		req.Rooms = splitList(rooms)
		if req.Rooms == nil {
			req.Rooms = []string{}
		}
	}
	return req
}

// diffLists returns what is in b and not a, and in a and not b.
func diffLists(a, b []string) (added, removed []string) {
	for _, x := range b {
		if !slices.Contains(a, x) {
			added = append(added, x)
		}
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			removed = append(removed, x)
		}
	}
	return added, removed
}

func containsStr(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
