package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/kardianos/service"

	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/packaging"
)

// Installed is what Install did.
type Installed struct {
	Spec *Spec
	// BootNote says how the service starts at boot (see Spec.BootNote).
	BootNote string
	// NotEnrolled: the device has no usable identity yet, so the service
	// will not connect until it is enrolled and restarted.
	NotEnrolled bool
}

// Install writes the service definition and enables it; it does not start
// the service. It refuses a binary that is not an absolute path or is a
// temporary `go run` build, everything New refuses, a system service
// without Home (KindUsage), without an enrollment (KindNotEnrolled) or with
// the token in the keyring, and a service that is already installed. When
// the service manager fails a step, what was written is removed again, and
// the error says whether that worked.
func Install(ctx context.Context, cfg Config) (*Installed, error) {
	if cfg.Executable == "" || !filepath.IsAbs(cfg.Executable) {
		return nil, errors.New("cannot tell where the roomrelay binary is; run it by its full path")
	}
	if strings.Contains(cfg.Executable, string(filepath.Separator)+"go-build") {
		return nil, fail(device.KindFailed, errors.New("this roomrelay is a temporary `go run` build: the service would lose its binary.\n  Build or install it first (go build -o ~/.local/bin/roomrelay ./cmd/roomrelay) and run install from there"))
	}
	s, err := New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := s.checkCredentials(); err != nil {
		return nil, err
	}
	if s.isTask() {
		if err := s.installTask(ctx); err != nil {
			return nil, err
		}
		return s.installResult(), nil
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	if ok, err := s.installed(); err != nil {
		return nil, fmt.Errorf("check for an existing service: %w", err)
	} else if ok {
		where := s.UnitPath
		if where == "" {
			where = "service " + packaging.Name
		}
		return nil, fail(device.KindFailed, fmt.Errorf("roomrelay is already installed as a %s (%s).\n  To pick up a new binary or flags: roomrelay uninstall, then roomrelay install; to restart it: roomrelay restart", s.Kind, where))
	}
	if err := s.svc.Install(); err != nil {
		s.cfg.Logger.Debug("service install failed; rolling back", "kind", s.Kind, "err", err)
		rbErr := s.rollback()
		msg := fmt.Errorf("install the %s: %w", s.Kind, explain(err))
		if rbErr != nil {
			return nil, fmt.Errorf("%w\n  and removing what was written failed too: %w (remove %s by hand)", msg, rbErr, s.UnitPath)
		}
		return nil, fmt.Errorf("%w\n  nothing was left installed", msg)
	}
	return s.installResult(), nil
}

// installResult is the result of an install that succeeded.
func (s *Spec) installResult() *Installed {
	s.cfg.Logger.Debug("service installed", "kind", s.Kind, "unit", s.UnitPath)
	r := &Installed{Spec: s, BootNote: s.BootNote()}
	if _, err := device.LoadConfig(s.Paths); err != nil {
		r.NotEnrolled = true
	}
	return r
}

// checkCredentials refuses a system service unless the token is in the file
// store: a system service cannot reach any user's keyring.
func (s *Spec) checkCredentials() error {
	if !s.System {
		return nil
	}
	if s.Home == "" {
		return fail(device.KindUsage, errors.New("--system needs --home DIR: a system service does not run in your account, so say where its config, state and data live (e.g. /var/lib/roomrelay)"))
	}
	cfg, err := device.LoadConfig(s.Paths)
	if err != nil {
		if device.KindOf(err) == device.KindNotEnrolled {
			return fail(device.KindNotEnrolled, fmt.Errorf("--system needs an enrolled device with the file credential store: run\n  roomrelay enroll --home %s --credential-store file --hub URL --code CODE\n  first (as the account the service will run as)", s.Home))
		}
		return err
	}
	if cfg.CredentialStore != credstore.KindFile {
		return fail(device.KindFailed, fmt.Errorf("--system refused: this device keeps its token in the OS keyring (credential store %q), which a system service cannot reach.\n  Install the default per-user service instead (roomrelay install, without --system), or enroll again with\n  --credential-store file (a 0600 file in %s) and retry", nonEmpty(string(cfg.CredentialStore), "keyring"), s.Paths.Config))
	}
	return nil
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// rollback undoes a partial install: disable and remove what was written.
func (s *Spec) rollback() error {
	uerr := s.svc.Uninstall()
	if s.UnitPath == "" {
		return uerr
	}
	if err := os.Remove(s.UnitPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if runtime.GOOS == "linux" {
		// Drop an enable symlink a failed step may have left.
		wants := filepath.Join(filepath.Dir(s.UnitPath), "default.target.wants", packaging.Name+".service")
		if s.System {
			wants = filepath.Join(filepath.Dir(s.UnitPath), "multi-user.target.wants", packaging.Name+".service")
		}
		if err := os.Remove(wants); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// explain turns the bare errors kardianos passes up into something to act on.
func explain(err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("permission denied: %w (a --system service needs root; a per-user one needs a writable home)", err)
	case strings.Contains(err.Error(), "exit status"):
		return fmt.Errorf("%w (the service manager refused; `journalctl --user -xe` or `systemctl --user status roomrelay` may say why)", err)
	}
	return err
}

// Uninstalled is what Uninstall did.
type Uninstalled struct {
	Spec *Spec
	// ManagerErr is the service manager's failure to uninstall, when the
	// service file was removed anyway (nil when it did not fail).
	ManagerErr error
}

// Uninstall stops the service and removes its definition; the device's
// config, enrollment, state and data stay. A service that is not installed
// is KindFailed.
func Uninstall(ctx context.Context, cfg Config) (*Uninstalled, error) {
	s, err := New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if s.isTask() {
		if err := s.uninstallTask(ctx); err != nil {
			return nil, err
		}
		return &Uninstalled{Spec: s}, nil
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	ok, err := s.installed()
	if err != nil {
		return nil, fmt.Errorf("check for the service: %w", err)
	}
	if !ok {
		where := ""
		if s.UnitPath != "" {
			where = " (no " + s.UnitPath + ")"
		}
		hint := ""
		if !s.System && runtime.GOOS != "windows" {
			hint = "\n  if you installed it with --system, run: sudo roomrelay uninstall --system"
		}
		return nil, fail(device.KindFailed, fmt.Errorf("roomrelay is not installed as a %s%s: nothing to uninstall%s", s.Kind, where, hint))
	}
	r := &Uninstalled{Spec: s}
	_ = s.svc.Stop() // stopping what is not running is fine
	if err := s.svc.Uninstall(); err != nil {
		// Finish the job: a definition without its service manager entry is
		// exactly the half-state to avoid.
		if rbErr := s.rollback(); rbErr != nil {
			return nil, fmt.Errorf("uninstall the %s: %w; removing %s failed too: %w", s.Kind, explain(err), s.UnitPath, rbErr)
		}
		r.ManagerErr = err
	}
	if runtime.GOOS == "linux" {
		// A unit that had failed (a revoked device exits 3 and is not
		// restarted) stays loaded as "not-found failed" after its file is
		// gone: listed by `systemctl --failed`, and reported failed again
		// right after the next install. Make systemd forget it; a unit that
		// was not failed makes this a no-op or "not loaded", both fine.
		_, _ = s.cfg.Systemctl(ctx, !s.System, "reset-failed", packaging.Name+".service")
	}
	s.cfg.Logger.Debug("service uninstalled", "kind", s.Kind, "unit", s.UnitPath)
	return r, nil
}

// Verb is what Control does to an installed service.
type Verb string

const (
	Start   Verb = "start"
	Stop    Verb = "stop"
	Restart Verb = "restart"
)

// Control starts, stops or restarts the installed service. A service that
// is not installed is KindFailed; on Linux a refusal carries systemctl's
// own message (kardianos drops it) and where the journal says more.
func Control(ctx context.Context, cfg Config, verb Verb) (*Spec, error) {
	switch verb {
	case Start, Stop, Restart:
	default:
		return nil, fail(device.KindUsage, fmt.Errorf("unknown service verb %q: want start, stop or restart", verb))
	}
	s, err := New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if s.isTask() {
		if err := s.controlTask(ctx, verb); err != nil {
			return nil, err
		}
		return s, nil
	}
	if err := s.open(); err != nil {
		return nil, err
	}
	if ok, err := s.installed(); err != nil {
		return nil, fmt.Errorf("check for the service: %w", err)
	} else if !ok {
		flag := ""
		if s.System {
			flag = " --system"
		}
		return nil, fail(device.KindFailed, fmt.Errorf("roomrelay is not installed as a %s: run roomrelay install%s first", s.Kind, flag))
	}
	if runtime.GOOS == "linux" {
		// systemctl itself, for its error message (kardianos drops stderr).
		if out, err := s.cfg.Systemctl(ctx, !s.System, string(verb), packaging.Name+".service"); err != nil {
			return nil, causedBy(fmt.Errorf("%s: %s\n  see: %s", verb, out, JournalHint(s.System)), err)
		}
	} else if err := service.Control(s.svc, string(verb)); err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	s.cfg.Logger.Debug("service controlled", "verb", verb, "kind", s.Kind)
	return s, nil
}

// causedBy is err with cause in its chain but not in its text: systemctl's
// output says more than its exit status, which stays reachable with
// errors.As.
func causedBy(err, cause error) error { return &causeError{err: err, cause: cause} }

type causeError struct{ err, cause error }

func (e *causeError) Error() string   { return e.err.Error() }
func (e *causeError) Unwrap() []error { return []error{e.err, e.cause} }
