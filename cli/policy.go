package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
)

func policyPath(p Paths) string { return filepath.Join(p.Config, daemon.PolicyFile) }

// policyFlags adds --home and returns a loader of the owner's policy file
// (a missing file is the deny-all policy).
func policyFlags(fs *flag.FlagSet, e *Env) func() (Paths, *allowlist.Policy, error) {
	paths := pathFlags(fs, e)
	return func() (Paths, *allowlist.Policy, error) {
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
	register(&Command{
		Name:     "enable",
		Synopsis: "PROJECT [--allow CMD,...] [--rooms ID,...]",
		Summary:  "serve a project on this device, with the commands you allow",
		Help: `Writes the local policy file. Without --allow only the three read tools are
allowed (read_room, list_room_apps, read_room_app_status); proposals need
--allow propose_room_snippet_app,... explicitly. Without --rooms every room of
the project is visible; with it, other rooms answer not_found. A running agent
picks the change up within a second, without restart, and tells the hub.
Known commands: ` + strings.Join(relay.CommandNames(), ", ") + `.`,
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
			load := policyFlags(fs, e)
			allow := fs.String("allow", "", "comma-separated `commands` to allow (default: the read tools)")
			roomList := fs.String("rooms", "", "comma-separated room `ids` to expose (default: all)")
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
				if err := pol.Enable(args[0], splitList(*allow), splitList(*roomList)); err != nil {
					return exitErr(ExitUsage, err)
				}
				if err := p.MkdirAll(); err != nil {
					return err
				}
				if err := pol.Save(policyPath(p)); err != nil {
					return err
				}
				info, _ := pol.Project(args[0])
				rooms := "all rooms"
				if len(info.Rooms) > 0 {
					rooms = "rooms " + strings.Join(info.Rooms, ", ")
				}
				fmt.Fprintf(e.Stdout, "enabled %s: %s; %s; rate %s\n", args[0], strings.Join(info.Commands, ", "), rooms, info.Rate)
				if cfg, err := loadDeviceConfig(p); err == nil && !containsStr(cfg.Projects, args[0]) {
					fmt.Fprintf(e.Stderr, "note: the hub has not enrolled this device for %s yet; it is served once both hold (`roomrelay enroll` with a code for %s)\n", args[0], args[0])
				}
				return nil
			}
		},
	})
	register(&Command{
		Name:     "disable",
		Synopsis: "PROJECT",
		Summary:  "stop serving a project on this device",
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
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
				if err := pol.Save(policyPath(p)); err != nil {
					return err
				}
				fmt.Fprintf(e.Stdout, "disabled %s: every command for it now answers project_not_enabled\n", args[0])
				return nil
			}
		},
	})
	register(&Command{
		Name:     "policy show",
		Synopsis: "[--json]",
		Summary:  "show what this device serves: projects, commands, rooms, rate limits",
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
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
					return json.NewEncoder(e.Stdout).Encode(map[string]any{"file": policyPath(p), "in_flight": pol.InFlight(), "projects": ps})
				}
				fmt.Fprintf(e.Stdout, "# %s\n", policyPath(p))
				if len(pol.Projects()) == 0 {
					fmt.Fprintln(e.Stdout, "# no project enabled: every command is denied (roomrelay enable PROJECT)")
					return nil
				}
				_, err = e.Stdout.Write(pol.Marshal())
				return err
			}
		},
	})
}

func containsStr(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
