package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"

	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/allowlist"
)

func init() {
	Register(&Command{
		Name:     "provider",
		Synopsis: "[app|builtin] [--json]",
		Summary:  "show or select the room provider: the desktop app, or roomrelay's own store",
		Help: `With no argument prints the room provider the policy selects. 'app' selects
the desktop app that connects to the local API (docs/provider-protocol.md):
reads of its rooms go to it, and while it is closed they answer
app_not_running. 'builtin' (the default) selects roomrelay's own store. A
running agent makes the change (audited with this command's pid) and picks
it up at once; an app it refused with close code 4004 may then connect again.`,
		Setup: setupProvider,
	})
}

// setupProvider parses the flags of `roomrelay provider` and returns its runner.
func setupProvider(fs *flag.FlagSet, e *Env) Runner {
	load := policyFlags(fs, e)
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		args, err := interleavedFlags(fs, args)
		if err != nil {
			return err
		}
		if len(args) > 1 || (len(args) == 1 && args[0] != allowlist.ProviderApp && args[0] != allowlist.ProviderBuiltin) {
			return usagef("want app or builtin (or nothing, to show the selection)")
		}
		p, pol, err := load()
		if err != nil {
			return err
		}
		sel, changed := pol.Provider(), false
		if len(args) == 1 {
			want := args[0]
			if c := liveAgent(ctx, e, p); c != nil {
				// The running agent writes the file (one writer), audits and
				// reloads it.
				defer c.Close()
				var cur localapi.ProviderSelection
				hdr, err := c.Do(ctx, "GET", "policy/provider", nil, &cur, nil)
				if err != nil {
					return apiFailure("selected", err)
				}
				var res localapi.ProviderSelection
				if _, err := c.Do(ctx, "PUT", "policy/provider", map[string]string{"provider": want}, &res,
					http.Header{"If-Match": {hdr.Get("ETag")}}); err != nil {
					return apiFailure("selected", err)
				}
				sel, changed = res.Provider, res.Changed
			} else {
				changed = pol.Provider() != want
				if changed {
					if err := pol.SetProvider(want); err != nil {
						return exitErr(ExitUsage, err)
					}
					if err := p.MkdirAll(); err != nil {
						return err
					}
					if err := pol.Save(policyPath(p)); err != nil {
						return err
					}
				}
				sel = want
			}
		}
		if *asJSON {
			return json.NewEncoder(e.Stdout).Encode(map[string]any{"provider": sel, "changed": changed})
		}
		fmt.Fprintf(e.Stdout, "room provider: %s (%s)\n", sel, providerMeaning(sel))
		return nil
	}
}

// providerMeaning says what a selection does, for people.
func providerMeaning(sel string) string {
	if sel == allowlist.ProviderApp {
		return "the desktop app answers reads of its rooms; while it is closed they answer app_not_running"
	}
	return "roomrelay's own store; a desktop app's hello is refused with 4004 until `roomrelay provider app`"
}
