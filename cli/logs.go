package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/roomrelay/roomrelay/packaging"
)

func init() {
	Register(&Command{
		Name:     "logs",
		Synopsis: "[-f] [-n N] [--system]",
		Summary:  "show the agent service's log wherever the service manager keeps it",
		Help: `Linux: the journal (journalctl --user -u roomrelay.service; --system for a
system service). macOS: the LaunchAgent's log file (~/Library/Logs/roomrelay.err.log,
/Library/Logs for --system). Windows: agent.log in the state dir. An agent
started with 'roomrelay run' in a terminal logs to that terminal instead.
-f follows new lines until interrupted.`,
		Setup: setupLogs,
	})
}

// setupLogs parses the flags of `roomrelay logs` and returns its runner.
func setupLogs(fs *flag.FlagSet, e *Env) Runner {
	paths := pathFlags(fs, e)
	follow := fs.Bool("f", false, "follow: keep printing new lines")
	n := fs.Int("n", 50, "how many of the last `lines` to show first")
	system := fs.Bool("system", false, "the system service's log instead of the per-user one")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("logs takes no arguments")
		}
		if *n < 0 {
			return usagef("-n must be 0 or more")
		}
		switch runtime.GOOS {
		case "linux":
			return journal(ctx, e, *system, *n, *follow)
		case "darwin":
			dir := "/Library/Logs"
			if !*system {
				home, err := os.UserHomeDir()
				if err != nil {
					return err
				}
				dir = filepath.Join(home, "Library", "Logs")
			}
			return tailFile(ctx, e.Stdout, filepath.Join(dir, packaging.Name+".err.log"), *n, *follow, time.Second)
		default:
			p, err := paths()
			if err != nil {
				return err
			}
			return tailFile(ctx, e.Stdout, filepath.Join(p.State, "agent.log"), *n, *follow, time.Second)
		}
	}
}

// journal runs journalctl for the agent's unit, its output straight through.
func journal(ctx context.Context, e *Env, system bool, n int, follow bool) error {
	if _, err := exec.LookPath("journalctl"); err != nil {
		return exitErr(ExitUnavailable, errors.New("journalctl not found: the service's log is in the systemd journal; an agent run in a terminal logs there instead"))
	}
	args := []string{"-u", packaging.Name + ".service", "-n", strconv.Itoa(n), "--no-pager", "-o", "short-iso"}
	if !system {
		args = append([]string{"--user"}, args...)
	}
	if follow {
		args = append(args, "-f")
	}
	cmd := exec.CommandContext(ctx, "journalctl", args...)
	cmd.Stdout, cmd.Stderr = e.Stdout, e.Stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil && follow {
			return nil // interrupted: the normal end of -f
		}
		return exitErr(ExitFailure, fmt.Errorf("journalctl %v: %w", args, err))
	}
	return nil
}

// tailFile prints the last n lines of path, then with follow the lines
// appended after, checking every poll, until ctx ends. A file that shrinks
// (rotated or truncated) is read again from its start.
func tailFile(ctx context.Context, w io.Writer, path string, n int, follow bool, poll time.Duration) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return exitErr(ExitUnavailable, fmt.Errorf("no log at %s: is the service installed (`roomrelay service status`)? An agent run in a terminal logs there", path))
	}
	if err != nil {
		return err
	}
	defer func() { f.Close() }() // f is reopened after a rotation
	const window = 1 << 20       // the last lines are within the last MiB
	st, err := f.Stat()
	if err != nil {
		return err
	}
	off := max(st.Size()-window, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	lines := bytes.SplitAfter(buf, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	for _, l := range lines[max(len(lines)-n, 0):] {
		if _, err := w.Write(l); err != nil {
			return err
		}
	}
	if !follow {
		return nil
	}
	pos := st.Size()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		st, err := os.Stat(path)
		if err != nil {
			continue // between a rotation's rename and the new file
		}
		if st.Size() < pos || !os.SameFile(st, mustStat(f)) {
			f.Close()
			if f, err = os.Open(path); err != nil {
				continue
			}
			pos = 0
		}
		if st.Size() == pos {
			continue
		}
		r := bufio.NewReader(io.NewSectionReader(f, pos, st.Size()-pos))
		m, err := io.Copy(w, r)
		pos += m
		if err != nil {
			return err
		}
	}
}

func mustStat(f *os.File) os.FileInfo {
	st, err := f.Stat()
	if err != nil {
		return nil
	}
	return st
}
