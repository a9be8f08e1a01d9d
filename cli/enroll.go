package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
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
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
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
				if err := p.MkdirAll(); err != nil {
					return err
				}
				cs, err := credstore.Open(ctx, credstore.Kind(*store), p.Config)
				if err != nil {
					return exitErr(ExitUnavailable, err)
				}
				if *name == "" {
					*name, _ = os.Hostname()
				}
				// An already-enrolled device at the same hub adds the project to
				// its identity instead of becoming a second device.
				prev, _ := loadDeviceConfig(p)
				existing := ""
				if prev != nil && prev.Hub == *hubURL {
					if t, err := cs.Get(ctx, prev.DeviceID); err == nil {
						existing = t
					}
				}
				// Enrolling again (another project) trusts the CA it trusted before.
				ca := *caFile
				if ca == "" && prev != nil && prev.Hub == *hubURL {
					ca = prev.CAFile
				}
				if ca, err = absCAFile(ca); err != nil {
					return exitErr(ExitUsage, err)
				}
				hc, err := hubHTTPClient(ca)
				if err != nil {
					return err
				}
				cl := hubclient.New(*hubURL, "")
				cl.HTTP = hc
				enr, err := cl.Enroll(ctx, *code, *name, runtime.GOOS, existing)
				var ae *hubclient.APIError
				if existing != "" && errors.As(err, &ae) && (ae.Code == "revoked" || ae.Code == "invalid_token") {
					// The stored identity is dead (revoked, or unknown to this
					// hub): the hub refused it before spending the code, so the
					// same code starts a fresh enrollment that replaces it.
					why := "was revoked"
					if ae.Code == "invalid_token" {
						why = "is not known to this hub"
					}
					fmt.Fprintf(e.Stderr, "device %s %s: enrolling as a new device; it replaces the old identity in the credential store\n", prev.DeviceID, why)
					enr, err = cl.Enroll(ctx, *code, *name, runtime.GOOS, "")
				}
				if err != nil {
					if errors.As(err, &ae) {
						return exitErr(ExitFailure, fmt.Errorf("enrollment refused: %s (%s); ask the hub operator for a new code", ae.Message, ae.Code))
					}
					return hubCallErr(err)
				}
				if err := cs.Set(ctx, enr.DeviceID, enr.Token); err != nil {
					return exitErr(ExitUnavailable, fmt.Errorf("the hub enrolled device %s but the token could not be stored: %w; enroll again with a new code", enr.DeviceID, err))
				}
				cfg := &deviceConfig{Hub: *hubURL, DeviceID: enr.DeviceID, DeviceName: *name, Projects: enr.Projects,
					CredentialStore: cs.Kind(), CAFile: ca, EnrolledAt: time.Now().UTC()}
				if prev != nil && prev.DeviceID == enr.DeviceID {
					cfg.EnrolledAt = prev.EnrolledAt
				}
				slices.Sort(cfg.Projects)
				if err := saveDeviceConfig(p, cfg); err != nil {
					return err
				}
				if prev != nil && prev.DeviceID != enr.DeviceID {
					// The old identity's secret is of no use any more.
					if err := cs.Delete(ctx, prev.DeviceID); err != nil && !errors.Is(err, credstore.ErrNotFound) {
						e.Logger.Warn("could not remove the replaced device's token", "device", prev.DeviceID, "err", err)
					}
				}
				if cs.Kind() == credstore.KindFile {
					e.Logger.Warn("device token stored in a file by explicit choice", "where", cs.Where())
				}
				if *asJSON {
					return json.NewEncoder(e.Stdout).Encode(map[string]any{"device_id": enr.DeviceID, "project": enr.Project,
						"projects": enr.Projects, "hub": *hubURL, "credential_store": cs.Where()})
				}
				fmt.Fprintf(e.Stdout, "enrolled device %s for project %s at %s\ntoken stored in the %s\nnext: roomrelay enable %s   (serve it), then roomrelay run (or install the service)\n",
					enr.DeviceID, enr.Project, *hubURL, cs.Where(), enr.Project)
				return nil
			}
		},
	})
}
