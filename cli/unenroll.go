package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
)

// unenrollReport is `roomrelay unenroll --json`.
type unenrollReport struct {
	DeviceID string `json:"device_id"`
	Hub      string `json:"hub"`
	// HubRevoked: the hub revoked the device (or had already); false with
	// --local-only or when the hub did not know the token.
	HubRevoked bool     `json:"hub_revoked"`
	HubNote    string   `json:"hub_note,omitempty"`
	Removed    []string `json:"removed"`
	Kept       []string `json:"kept"`
}

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
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
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
				cfg, err := loadDeviceConfig(p)
				var ee *ExitError
				if errors.As(err, &ee) && ee.Code == ExitNotEnrolled {
					if *asJSON {
						return json.NewEncoder(e.Stdout).Encode(map[string]any{"enrolled": false})
					}
					fmt.Fprintln(e.Stdout, "this device is not enrolled: nothing to do")
					return nil
				}
				if err != nil {
					return err
				}
				r, err := unenroll(ctx, e, p, cfg, *localOnly)
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
		},
	})
}

func unenroll(ctx context.Context, e *Env, p devicePaths, cfg *deviceConfig, localOnly bool) (*unenrollReport, error) {
	r := &unenrollReport{DeviceID: cfg.DeviceID, Hub: cfg.Hub}
	cs, err := credstore.Open(ctx, cfg.CredentialStore, p.Config)
	if err != nil {
		return nil, exitErr(ExitUnavailable, fmt.Errorf("the credential store (%s) holding the device token: %w; nothing was removed", cfg.CredentialStore, err))
	}
	token, terr := cs.Get(ctx, cfg.DeviceID)
	switch {
	case localOnly:
		r.HubNote = "not asked (--local-only): revoke it there with `roomrelay hub revoke " + cfg.DeviceID + "`"
	case errors.Is(terr, credstore.ErrNotFound):
		r.HubNote = "no token was stored, so the hub could not be asked: revoke it there with `roomrelay hub revoke " + cfg.DeviceID + "`"
	case terr != nil:
		return nil, exitErr(ExitUnavailable, fmt.Errorf("read the device token from the %s: %w; nothing was removed", cs.Where(), terr))
	default:
		hc, err := hubHTTPClient(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		cl := hubclient.New(cfg.Hub, "")
		cl.HTTP = hc
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err = cl.Unenroll(cctx, token)
		cancel()
		var ae *hubclient.APIError
		switch {
		case err == nil:
			r.HubRevoked = true
		case errors.As(err, &ae) && ae.Status == 401:
			r.HubNote = "the hub does not know this device's token (" + ae.Code + "): nothing to revoke there"
		default:
			herr := hubCallErr(err)
			return nil, exitErr(ExitUnavailable, fmt.Errorf("%v; nothing was removed: retry, or `roomrelay unenroll --local-only` to forget the identity here anyway", herr))
		}
	}
	if err := cs.Delete(ctx, cfg.DeviceID); err != nil && !errors.Is(err, credstore.ErrNotFound) {
		return nil, exitErr(ExitUnavailable, fmt.Errorf("remove the device token from the %s: %w", cs.Where(), err))
	}
	r.Removed = append(r.Removed, "the device token ("+cs.Where()+")")
	if err := os.Remove(filepath.Join(p.Config, deviceConfigName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove the device identity: %w", err)
	}
	r.Removed = append(r.Removed, "the device identity ("+filepath.Join(p.Config, deviceConfigName)+")")
	// Queued events belong to the old identity; the status file describes it.
	for _, name := range []string{agent.OutboxFile, agent.StatusFile} {
		if err := os.Remove(filepath.Join(p.State, name)); err == nil && name == agent.OutboxFile {
			r.Removed = append(r.Removed, "events queued for the hub ("+filepath.Join(p.State, name)+")")
		}
	}
	r.Kept = []string{
		"local rooms (" + filepath.Join(p.Data, daemon.RoomsDB) + ")",
		"the audit log (" + filepath.Join(p.State, daemon.AuditDir) + ")",
		"the policy (" + filepath.Join(p.Config, daemon.PolicyFile) + ")",
	}
	return r, nil
}
