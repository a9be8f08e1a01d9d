package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/roomrelay/roomrelay/agent/device"
)

func init() {
	Register(&Command{
		Name:     "unenroll",
		Synopsis: "[--local-only] [--json]",
		Summary:  "leave the hub: revoke this device's token there, forget the identity here, keep rooms and audit log",
		Help: `Tells the hub to revoke this device's token (the device's own token
authorises it), then removes the token from the credential store and the
device identity (config.json), and the events still queued for the hub.
Local Rooms, the audit log and the owner's policy stay. A running agent is
stopped by the hub's revocation (it exits 3).

If the hub cannot be reached, nothing is removed: retry, or pass
--local-only to forget the identity here anyway (the hub then still lists
the device until its operator runs 'roomrelay hub revoke DEVICE').

Exit codes: 0 unenrolled (or not enrolled: nothing to do); 4 the hub or the
credential store is unreachable.`,
		Setup: setupUnenroll,
	})
}

// setupUnenroll parses the flags of `roomrelay unenroll` and returns its runner.
func setupUnenroll(fs *flag.FlagSet, e *Env) Runner {
	paths := pathFlags(fs, e)
	localOnly := fs.Bool("local-only", false, "do not contact the hub; only forget the identity on this device")
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("unenroll takes no arguments")
		}
		p, err := paths()
		if err != nil {
			return err
		}
		cfg, err := device.LoadConfig(p)
		if device.KindOf(err) == device.KindNotEnrolled {
			if *asJSON {
				return json.NewEncoder(e.Stdout).Encode(map[string]any{"enrolled": false})
			}
			fmt.Fprintln(e.Stdout, "this device is not enrolled: nothing to do")
			return nil
		}
		if err != nil {
			return err
		}
		r, err := device.Unenroll(ctx, p, cfg, *localOnly)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(e.Stdout).Encode(r)
		}
		how := "the hub revoked it"
		if !r.HubRevoked {
			how = r.HubNote
		}
		fmt.Fprintf(e.Stdout, "unenrolled device %s from %s: %s\n", r.DeviceID, r.Hub, how)
		for _, s := range r.Removed {
			fmt.Fprintf(e.Stdout, "removed: %s\n", s)
		}
		for _, s := range r.Kept {
			fmt.Fprintf(e.Stdout, "kept:    %s\n", s)
		}
		fmt.Fprintln(e.Stdout, "to serve a hub again: roomrelay enroll --hub URL --code CODE")
		return nil
	}
}
