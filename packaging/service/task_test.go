package service_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/packaging"
	"github.com/roomrelay/roomrelay/packaging/service"
)

// TestSchtasksArgs pins the schtasks command lines the Windows per-user
// install runs (on every OS: they are plain argument lists). Each path is
// one argument however many spaces it has; os/exec quotes it for Windows
// the way packaging.WindowsCommandLine does.
func TestSchtasksArgs(t *testing.T) {
	xml := `C:\Users\Ann Lee\AppData\Local\Temp\roomrelay-task-1.xml`
	for _, tc := range []struct {
		got, want []string
	}{
		{service.TaskCreateArgs("roomrelay", xml), []string{"/Create", "/TN", "roomrelay", "/XML", xml}},
		{service.TaskDeleteArgs("roomrelay"), []string{"/Delete", "/TN", "roomrelay", "/F"}},
		{service.TaskRunArgs("roomrelay"), []string{"/Run", "/TN", "roomrelay"}},
		{service.TaskEndArgs("roomrelay"), []string{"/End", "/TN", "roomrelay"}},
		{service.TaskQueryArgs("roomrelay"), []string{"/Query", "/TN", "roomrelay", "/XML"}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("schtasks %q, want %q", tc.got, tc.want)
		}
	}
	line := packaging.WindowsCommandLine(service.TaskCreateArgs("roomrelay", xml))
	if want := `/Create /TN roomrelay /XML "` + xml + `"`; line != want {
		t.Errorf("command line %s, want %s", line, want)
	}
	if slices.Contains(service.TaskCreateArgs("roomrelay", xml), "/F") {
		t.Error("create replaces an existing task (/F)")
	}
	if !strings.HasPrefix(service.TaskStartsNote, "  ") {
		t.Error("the starts note is not indented like the other boot notes")
	}
}
