package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"runtime"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/agent/device"
)

func init() {
	Register(&Command{
		Name:     "enroll",
		Synopsis: "--hub URL --code CODE [--name NAME] [--credential-store keyring|file] [--ca-file FILE]",
		Summary:  "enroll this device with a hub for the project of a pairing code",
		Help: `Exchanges a one-time pairing code (from 'roomrelay hub pair') for a device
token. The token goes to the OS keyring; with --credential-store file it goes
to a 0600 file in the config dir instead (for headless or system installs).
The device id and hub go to config.json, and so does --ca-file (a PEM
file with the private CA that signed the hub's certificate): the agent
trusts it from then on. Enrolling again with a code for
another project adds that project to the same device. After the hub revoked
this device, enrolling with a new code makes it a new device: the old
identity and its token are replaced.

Enrollment alone serves nothing: the device owner still enables each project
with 'roomrelay enable PROJECT'.`,
		Setup: setupEnroll,
	})
}

// setupEnroll parses the flags of `roomrelay enroll` and returns its runner.
func setupEnroll(fs *flag.FlagSet, e *Env) Runner {
	paths := pathFlags(fs, e)
	hubURL := fs.String("hub", e.Getenv("ROOMRELAY_HUB"), "hub `url`, e.g. https://hub.example.com (env ROOMRELAY_HUB)")
	code := fs.String("code", "", "one-time pairing `code`")
	name := fs.String("name", "", "device `name` shown on the hub (default hostname)")
	store := fs.String("credential-store", string(credstore.KindKeyring), "where the token is kept: keyring, or file (0600, explicit choice)")
	asJSON := fs.Bool("json", false, "print JSON")
	caFile := caFileFlag(fs, e)
	return func(ctx context.Context, args []string) error {
		if *hubURL == "" || *code == "" || len(args) > 0 {
			return usagef("--hub and --code are required")
		}
		if _, err := agent.ConnectURL(*hubURL); err != nil {
			return usagef("--hub: %v", err)
		}
		p, err := paths()
		if err != nil {
			return err
		}
		enr, err := device.Enroll(ctx, p, device.EnrollOptions{Hub: *hubURL, Code: *code, Name: *name, OS: runtime.GOOS,
			Store: credstore.Kind(*store), CAFile: *caFile, Logger: e.Logger,
			Notice: func(s string) { fmt.Fprintln(e.Stderr, s) }})
		if err != nil {
			if device.KindOf(err) != device.KindFailed {
				return err
			}
			return hubCallErr(err)
		}
		cfg := enr.Config
		if *asJSON {
			return json.NewEncoder(e.Stdout).Encode(map[string]any{"device_id": cfg.DeviceID, "project": enr.Project,
				"projects": cfg.Projects, "hub": cfg.Hub, "credential_store": enr.Where})
		}
		fmt.Fprintf(e.Stdout, "enrolled device %s for project %s at %s\ntoken stored in the %s\nnext: roomrelay enable %s   (serve it), then roomrelay run (or install the service)\n",
			cfg.DeviceID, enr.Project, cfg.Hub, enr.Where, enr.Project)
		return nil
	}
}
