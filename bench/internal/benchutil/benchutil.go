// Package benchutil holds what the bench commands (idle, soak, storm)
// share to drive and measure processes on loopback.
package benchutil

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// FreeAddr returns a loopback host:port nothing listens on right now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// WaitFor polls cond every 250 ms until it holds, limit passed ("timed
// out") or ctx ended.
func WaitFor(ctx context.Context, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		if err := Sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// Sleep waits d or until ctx ends (its error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// StatusKiB is a "kB" field of /proc/PID/status (VmRSS, VmHWM, …); 0 when
// unreadable.
func StatusKiB(pid int, field string) int64 {
	return StatusField("/proc/"+strconv.Itoa(pid)+"/status", field)
}

// StatusField is the number a field of a /proc status file starts with
// (kB for memory, a count for context switches); 0 when unreadable.
func StatusField(path, field string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// RSSKiB is a process's resident set (VmRSS).
func RSSKiB(pid int) int64 { return StatusKiB(pid, "VmRSS") }
