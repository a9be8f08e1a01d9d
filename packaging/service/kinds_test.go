package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/packaging/service"
)

// TestRefusedBeforeLooking: what the caller got wrong is refused before
// the machine is asked anything, on every OS.
func TestRefusedBeforeLooking(t *testing.T) {
	_, err := service.Control(ctx, service.Config{}, "reload")
	refused(t, "an unknown verb", err, device.KindUsage, `unknown service verb "reload"`)
	for _, exe := range []string{"", "roomrelay", "bin/roomrelay"} {
		_, err = service.Install(ctx, service.Config{Executable: exe})
		refused(t, "install from "+exe, err, device.KindFailed, "cannot tell where the roomrelay binary is; run it by its full path")
	}
}

func TestJournalHint(t *testing.T) {
	if got := service.JournalHint(false); got != "journalctl --user -u roomrelay -e" {
		t.Errorf("per-user journal hint: %q", got)
	}
	if got := service.JournalHint(true); got != "journalctl -u roomrelay -e" {
		t.Errorf("system journal hint: %q", got)
	}
}

var ctx = context.Background()

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// refused checks that err is a failure of kind k whose text has every want.
func refused(t *testing.T, what string, err error, k device.Kind, wants ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want kind %d", what, k)
		return
	}
	if got := device.KindOf(err); got != k {
		t.Errorf("%s: kind %d, want %d: %v", what, got, k, err)
	}
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error lacks %q: %v", what, want, err)
		}
	}
}
