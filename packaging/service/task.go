package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/packaging"
)

// The Windows per-user agent: a Task Scheduler task started at the user's
// logon (packaging.WindowsLogonTask), managed with schtasks.exe. Only exit
// codes are read from schtasks, never its text, which is localized.

// SchtasksTimeout bounds one schtasks call.
const SchtasksTimeout = 30 * time.Second

// TaskStartsNote is how the logon task starts, for install and status.
const TaskStartsNote = "  it starts when you log in (a Task Scheduler logon task, in your session)"

// isTask reports whether this spec is the Windows per-user logon task.
func (s *Spec) isTask() bool { return runtime.GOOS == "windows" && !s.System }

func (s *Spec) taskName() string {
	if s.cfg.TaskName != "" {
		return s.cfg.TaskName
	}
	return packaging.Name
}

// TaskCreateArgs are schtasks' arguments that register the task name from
// the XML definition in xmlFile. No /F: an existing task is an error, not
// silently replaced.
func TaskCreateArgs(name, xmlFile string) []string {
	return []string{"/Create", "/TN", name, "/XML", xmlFile}
}

// TaskDeleteArgs remove the task; /F answers schtasks' confirmation prompt.
func TaskDeleteArgs(name string) []string { return []string{"/Delete", "/TN", name, "/F"} }

// TaskRunArgs start the task now; TaskEndArgs end its running instance.
func TaskRunArgs(name string) []string { return []string{"/Run", "/TN", name} }
func TaskEndArgs(name string) []string { return []string{"/End", "/TN", name} }

// TaskQueryArgs print the task's XML definition when it exists (exit 0);
// XML is the one schtasks output that is not localized.
func TaskQueryArgs(name string) []string { return []string{"/Query", "/TN", name, "/XML"} }

// RunSchtasks runs schtasks.exe, bounded by SchtasksTimeout, and returns its
// trimmed combined output. It is Config.Schtasks's default.
func RunSchtasks(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, SchtasksTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "schtasks.exe", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// CurrentUserID is the DOMAIN\user the logon task names (Config.CurrentUser's
// default).
func CurrentUserID() (string, error) {
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("who is installing the logon task: %w", err)
	}
	return u.Username, nil
}

// RenderTask is the task definition for this spec.
func (s *Spec) RenderTask() (string, error) {
	uid, err := s.cfg.CurrentUser()
	if err != nil {
		return "", err
	}
	return packaging.WindowsLogonTask(packaging.TaskParams{Exec: s.Exe, Args: s.Args(), UserID: uid, Name: s.taskName()})
}

// errNoQuery: schtasks exited 0 on /Query without printing the task.
// Wine's schtasks does that for every verb it lacks (/Query, /Run, /End).
var errNoQuery = errors.New("schtasks did not answer /Query (exit 0 and no task XML): this schtasks cannot query, run or end tasks (Wine's knows only /Create, /Delete and /Change)")

// taskExists asks schtasks whether the task is registered: exit 0 with the
// task's XML means yes, a non-zero exit no. A schtasks that cannot be run,
// or exits 0 without the XML, is an error (errNoQuery).
func (s *Spec) taskExists(ctx context.Context) (bool, error) {
	out, err := s.cfg.Schtasks(ctx, TaskQueryArgs(s.taskName())...)
	var ee *exec.ExitError
	switch {
	case err == nil && strings.Contains(out, "<Task"):
		return true, nil
	case err == nil:
		return false, errNoQuery
	case errors.As(err, &ee):
		return false, nil
	}
	return false, fmt.Errorf("run schtasks: %w", err)
}

func (s *Spec) schtasks(ctx context.Context, what string, args ...string) error {
	out, err := s.cfg.Schtasks(ctx, args...)
	if err != nil {
		return fmt.Errorf("%s: schtasks %s: %s: %w", what, strings.Join(args, " "), out, err)
	}
	s.cfg.Logger.Debug("schtasks", "args", args, "out", out)
	return nil
}

// installTask registers the logon task. schtasks registers it whole or not
// at all, so there is nothing to roll back.
func (s *Spec) installTask(ctx context.Context) error {
	text, err := s.RenderTask()
	if err != nil {
		return err
	}
	// Without an answer to /Query, /Create (no /F) still refuses to
	// replace an existing task.
	if ok, err := s.taskExists(ctx); err != nil && !errors.Is(err, errNoQuery) {
		return err
	} else if ok {
		return fail(device.KindFailed, fmt.Errorf("roomrelay is already installed as a %s (task \\%s).\n  To pick up a new binary or flags: roomrelay uninstall, then roomrelay install; to restart it: roomrelay restart", s.Kind, s.taskName()))
	}
	f, err := os.CreateTemp("", "roomrelay-task-*.xml")
	if err != nil {
		return fmt.Errorf("write the task definition: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(packaging.UTF16File(text))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write the task definition: %w", err)
	}
	if err := s.schtasks(ctx, "register the logon task", TaskCreateArgs(s.taskName(), f.Name())...); err != nil {
		return fmt.Errorf("%w\n  nothing was left installed", err)
	}
	return nil
}

// uninstallTask ends the agent the task started and removes the task.
func (s *Spec) uninstallTask(ctx context.Context) error {
	_, _ = s.cfg.Schtasks(ctx, TaskEndArgs(s.taskName())...) // ending what is not running is fine
	if err := s.schtasks(ctx, "remove the logon task", TaskDeleteArgs(s.taskName())...); err != nil {
		return fail(device.KindFailed, fmt.Errorf("%w\n  (is it installed? roomrelay service status)", err))
	}
	return nil
}

// controlTask starts or ends the task now. Ending is a hard stop
// (TerminateProcess): the hub sees the agent offline when its heartbeat
// lapses, not at once as after Ctrl+C.
func (s *Spec) controlTask(ctx context.Context, verb Verb) error {
	name := s.taskName()
	ok, err := s.taskExists(ctx)
	if err != nil {
		return fail(device.KindUnavailable, err)
	}
	if !ok {
		return fail(device.KindFailed, fmt.Errorf("roomrelay is not installed as a %s: run roomrelay install first", s.Kind))
	}
	if verb == Stop || verb == Restart {
		// Ending a task that is not running fails; for restart that is fine.
		if err := s.schtasks(ctx, "end the logon task", TaskEndArgs(name)...); err != nil && verb == Stop {
			return err
		}
	}
	if verb == Start || verb == Restart {
		return s.schtasks(ctx, "start the logon task", TaskRunArgs(name)...)
	}
	return nil
}

// statusTask reports on the task: installed when schtasks knows it, running
// when an agent for this enrollment is alive (its status file's pid), which
// holds whoever started it.
func (s *Spec) statusTask(ctx context.Context) (Report, error) {
	r := Report{Kind: s.Kind, UnitFile: `Task Scheduler \` + s.taskName()}
	ok, err := s.taskExists(ctx)
	if errors.Is(err, errNoQuery) {
		r.State, r.Problem = StateFailed, err.Error()
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if !ok {
		r.State, r.Problem = StateNotInstalled, "not installed: run `roomrelay install`"
		return r, nil
	}
	r.Installed, r.Starts = true, strings.TrimSpace(TaskStartsNote)
	if cfg, err := device.LoadConfig(s.Paths); err == nil {
		if _, running := device.RunningAgent(s.Paths, cfg); running {
			r.State, r.Running = StateRunning, true
			return r, nil
		}
	}
	r.State, r.Problem = StateStopped, "installed but not running: roomrelay start"
	return r, nil
}
