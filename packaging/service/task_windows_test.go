//go:build windows

package service_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"golang.org/x/sys/windows"

	"github.com/roomrelay/roomrelay/agent/device"

	"github.com/roomrelay/roomrelay/packaging/service"
)

// underWine reports whether this process runs under Wine (ntdll exports
// wine_get_version there).
func underWine() bool {
	return windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil
}

// TestLogonTaskInstallUninstall registers the per-user logon task with the
// real schtasks.exe under a test name, reads back what Task Scheduler
// stored, and removes it again. Under Wine, whose schtasks knows only
// /Create /XML, /Delete and /Change (and exits 0 on the rest), status must
// say it cannot tell and start must refuse; on real Windows status reads
// the task back.
func TestLogonTaskInstallUninstall(t *testing.T) {
	name := fmt.Sprintf("roomrelay-test-%d", os.Getpid())
	exe := `C:\Program Files\roomrelay test\roomrelay.exe`
	home := filepath.Join(t.TempDir(), "home with space")
	cfg := service.Config{Executable: exe, Home: home, TaskName: name}
	r, err := service.Install(context.Background(), cfg)
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	t.Cleanup(func() { _, _ = service.RunSchtasks(context.Background(), service.TaskDeleteArgs(name)...) })
	if r.Spec.Kind != "per-user logon task" || !r.NotEnrolled {
		t.Errorf("install result: kind %q, not enrolled %v", r.Spec.Kind, r.NotEnrolled)
	}
	stored := filepath.Join(os.Getenv("SystemRoot"), "System32", "Tasks", name)
	b, err := os.ReadFile(stored)
	switch {
	case err == nil:
		text := decodeTaskFile(b)
		// What Wine's Task Scheduler keeps of the definition: it parses the
		// whole file (a malformed one is refused) but stores no trigger,
		// principal or action command.
		wants := []string{`<URI>\` + name + `</URI>`, "<ExecutionTimeLimit>PT0S</ExecutionTimeLimit>", "<StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>"}
		if !underWine() {
			wants = append(wants, "<LogonTrigger>", "<Command>"+exe+"</Command>", `run --background --home &quot;`+home+`&quot;`, "<LogonType>InteractiveToken</LogonType>")
		}
		for _, want := range wants {
			if !strings.Contains(text, want) {
				t.Errorf("the stored task %s lacks %s:\n%s", stored, want, text)
			}
		}
	case os.IsPermission(err) && !underWine():
		t.Logf("the task store is not readable as this user (%v); status checks it instead", err)
	default:
		t.Errorf("task not stored: %v", err)
	}
	rep, err := service.Status(context.Background(), cfg)
	if underWine() {
		// Wine's schtasks exits 0 on /Query without printing anything:
		// status must say it cannot tell, and start must refuse, not
		// report a start that never happened.
		if err != nil || rep.State != service.StateFailed || !strings.Contains(rep.Problem, "did not answer /Query") {
			t.Errorf("status under Wine: %+v, %v", rep, err)
		}
		_, err := service.Control(context.Background(), cfg, service.Start)
		refused(t, "start under Wine", err, device.KindUnavailable, "did not answer /Query")
	} else if err != nil || !rep.Installed || rep.Running || rep.State != service.StateStopped {
		t.Errorf("status after install: %+v, %v", rep, err)
	}
	if _, err := service.Install(context.Background(), cfg); err == nil {
		t.Error("a second install succeeded")
	}
	if _, err := service.Uninstall(context.Background(), cfg); err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	if _, err := os.Stat(stored); !os.IsNotExist(err) && !os.IsPermission(err) {
		t.Errorf("the task is still stored after uninstall: %v", err)
	}
	if _, err := service.Uninstall(context.Background(), cfg); err == nil {
		t.Error("uninstalling a task that is gone succeeded")
	}
}

// decodeTaskFile reads a stored task: UTF-16LE with a byte-order mark, or
// plain bytes.
func decodeTaskFile(b []byte) string {
	if len(b) >= 2 && b[0] == 0xff && b[1] == 0xfe {
		u := make([]uint16, 0, len(b)/2)
		for i := 2; i+1 < len(b); i += 2 {
			u = append(u, uint16(b[i])|uint16(b[i+1])<<8)
		}
		return string(utf16.Decode(u))
	}
	return string(b)
}
