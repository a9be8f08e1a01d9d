package device

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/internal/tlsfiles"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// EnrollOptions is what Enroll needs besides the paths.
type EnrollOptions struct {
	Hub, Code string
	Name      string // shown on the hub; the hostname when empty
	OS        string // runtime.GOOS, as the hub records it
	Store     credstore.Kind
	// CAFile is a PEM file with the CA that signed the hub's certificate;
	// empty reuses the one an earlier enrollment at the same hub trusted.
	CAFile string
	// Notice tells the person something they should know while it runs
	// (an old identity is being replaced); nil drops it.
	Notice func(string)
	Logger *slog.Logger
}

// Enrollment is what Enroll did.
type Enrollment struct {
	Config  *Config
	Project string // the pairing code's project
	Where   string // where the token went, for people ("OS keyring", "file …")
	// Replaced is the device id of an identity this enrollment replaced
	// (revoked, or unknown to the hub); empty when there was none.
	Replaced string
}

// Enroll exchanges a one-time pairing code for a device token. The token
// goes to the credential store, the identity to config.json. A device
// already enrolled at the same hub adds the code's project to its identity;
// after the hub revoked it (or forgot it) the same code starts a fresh
// enrollment that replaces the old identity and removes its token.
func Enroll(ctx context.Context, p Paths, o EnrollOptions) (*Enrollment, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := p.MkdirAll(); err != nil {
		return nil, err
	}
	cs, err := credstore.Open(ctx, o.Store, p.Config)
	if err != nil {
		return nil, fail(KindUnavailable, err)
	}
	if o.Name == "" {
		o.Name, _ = os.Hostname()
	}
	prev, _ := LoadConfig(p)
	sameHub := prev != nil && prev.Hub == o.Hub
	existing := ""
	if sameHub {
		if t, err := cs.Get(ctx, prev.DeviceID); err == nil {
			existing = t
		}
	}
	ca := o.CAFile
	if ca == "" && sameHub {
		ca = prev.CAFile // enrolling again (another project) trusts the CA it trusted before
	}
	if ca != "" {
		// Absolute: the service runs the agent from another directory.
		if ca, err = filepath.Abs(ca); err != nil {
			return nil, fail(KindUsage, fmt.Errorf("--ca-file: %w", err))
		}
	}
	hc, err := tlsfiles.HTTPClient(ca)
	if err != nil {
		return nil, fail(KindUsage, fmt.Errorf("--ca-file: %w", err))
	}
	cl := hubclient.New(o.Hub, "")
	cl.HTTP = hc
	out := &Enrollment{}
	enr, err := cl.Enroll(ctx, o.Code, o.Name, o.OS, existing)
	var ae *hubclient.APIError
	if existing != "" && errors.As(err, &ae) && (ae.Code == hubapi.CodeRevoked || ae.Code == hubapi.CodeInvalidToken) {
		// The stored identity is dead: the hub refused it before spending
		// the code, so the same code starts a fresh enrollment.
		why := "was revoked"
		if ae.Code == hubapi.CodeInvalidToken {
			why = "is not known to this hub"
		}
		if o.Notice != nil {
			o.Notice(fmt.Sprintf("device %s %s: enrolling as a new device; it replaces the old identity in the credential store", prev.DeviceID, why))
		}
		enr, err = cl.Enroll(ctx, o.Code, o.Name, o.OS, "")
	}
	if err != nil {
		if errors.As(err, &ae) {
			return nil, fail(KindRefused, fmt.Errorf("enrollment refused: %s (%s); ask the hub operator for a new code", ae.Message, ae.Code))
		}
		return nil, err // a transport failure: the caller explains it
	}
	if err := cs.Set(ctx, enr.DeviceID, enr.Token); err != nil {
		return nil, fail(KindUnavailable, fmt.Errorf("the hub enrolled device %s but the token could not be stored: %w; enroll again with a new code", enr.DeviceID, err))
	}
	cfg := &Config{Hub: o.Hub, DeviceID: enr.DeviceID, DeviceName: o.Name, Projects: enr.Projects,
		CredentialStore: cs.Kind(), CAFile: ca, EnrolledAt: time.Now().UTC()}
	if prev != nil && prev.DeviceID == enr.DeviceID {
		cfg.EnrolledAt = prev.EnrolledAt
	}
	slices.Sort(cfg.Projects)
	if err := SaveConfig(p, cfg); err != nil {
		return nil, err
	}
	if prev != nil && prev.DeviceID != enr.DeviceID {
		out.Replaced = prev.DeviceID
		// The old identity's secret is of no use any more.
		if err := cs.Delete(ctx, prev.DeviceID); err != nil && !errors.Is(err, credstore.ErrNotFound) {
			log.Warn("could not remove the replaced device's token", "device", prev.DeviceID, "err", err)
		}
	}
	if cs.Kind() == credstore.KindFile {
		log.Warn("device token stored in a file by explicit choice", "where", cs.Where())
	}
	out.Config, out.Project, out.Where = cfg, enr.Project, cs.Where()
	return out, nil
}

// Unenrollment is what Unenroll did: `roomrelay unenroll --json`.
type Unenrollment struct {
	DeviceID string `json:"device_id"`
	Hub      string `json:"hub"`
	// HubRevoked: the hub revoked the device (or had already); false with
	// localOnly or when the hub did not know the token.
	HubRevoked bool     `json:"hub_revoked"`
	HubNote    string   `json:"hub_note,omitempty"`
	Removed    []string `json:"removed"`
	Kept       []string `json:"kept"`
}

// Unenroll leaves the hub: the hub revokes the device on its own token
// (unless localOnly), then the token, the identity and the events queued
// for the hub are removed. Local Rooms, the audit log and the policy stay.
// An unreachable hub removes nothing (KindUnavailable).
func Unenroll(ctx context.Context, p Paths, cfg *Config, localOnly bool) (*Unenrollment, error) {
	r := &Unenrollment{DeviceID: cfg.DeviceID, Hub: cfg.Hub}
	cs, err := credstore.Open(ctx, cfg.CredentialStore, p.Config)
	if err != nil {
		return nil, fail(KindUnavailable, fmt.Errorf("the credential store (%s) holding the device token: %w; nothing was removed", cfg.CredentialStore, err))
	}
	token, terr := cs.Get(ctx, cfg.DeviceID)
	switch {
	case localOnly:
		r.HubNote = "not asked (--local-only): revoke it there with `roomrelay hub revoke " + cfg.DeviceID + "`"
	case errors.Is(terr, credstore.ErrNotFound):
		r.HubNote = "no token was stored, so the hub could not be asked: revoke it there with `roomrelay hub revoke " + cfg.DeviceID + "`"
	case terr != nil:
		return nil, fail(KindUnavailable, fmt.Errorf("read the device token from the %s: %w; nothing was removed", cs.Where(), terr))
	default:
		revoked, note, err := unenrollAtHub(ctx, cfg, token)
		if err != nil {
			return nil, err
		}
		r.HubRevoked, r.HubNote = revoked, note
	}
	if err := cs.Delete(ctx, cfg.DeviceID); err != nil && !errors.Is(err, credstore.ErrNotFound) {
		return nil, fail(KindUnavailable, fmt.Errorf("remove the device token from the %s: %w", cs.Where(), err))
	}
	r.Removed = append(r.Removed, "the device token ("+cs.Where()+")")
	if err := os.Remove(filepath.Join(p.Config, ConfigFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove the device identity: %w", err)
	}
	r.Removed = append(r.Removed, "the device identity ("+filepath.Join(p.Config, ConfigFile)+")")
	// Queued events belong to the old identity; the status file describes it.
	for _, name := range []string{agent.OutboxFile, agent.StatusFile} {
		if err := os.Remove(filepath.Join(p.State, name)); err == nil && name == agent.OutboxFile {
			r.Removed = append(r.Removed, "events queued for the hub ("+filepath.Join(p.State, name)+")")
		}
	}
	r.Kept = []string{
		"local rooms (" + filepath.Join(p.Data, agent.RoomsDB) + ")",
		"the audit log (" + filepath.Join(p.State, agent.AuditDir) + ")",
		"the policy (" + filepath.Join(p.Config, agent.PolicyFile) + ")",
	}
	return r, nil
}

// unenrollAtHub asks the hub to revoke the device on its own token.
func unenrollAtHub(ctx context.Context, cfg *Config, token string) (revoked bool, note string, err error) {
	var hc *http.Client
	if hc, err = tlsfiles.HTTPClient(cfg.CAFile); err != nil {
		return false, "", fail(KindUsage, fmt.Errorf("the CA file in the device config: %w", err))
	}
	cl := hubclient.New(cfg.Hub, "")
	cl.HTTP = hc
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err = cl.Unenroll(cctx, token)
	var ae *hubclient.APIError
	switch {
	case err == nil:
		return true, "", nil
	case errors.As(err, &ae) && ae.Status == 401:
		return false, "the hub does not know this device's token (" + ae.Code + "): nothing to revoke there", nil
	}
	return false, "", fail(KindUnavailable, fmt.Errorf("%w; nothing was removed: retry, or `roomrelay unenroll --local-only` to forget the identity here anyway", hubclient.Explain(err)))
}
