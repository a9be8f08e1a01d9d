package events

import (
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// TestLeaf: agent/events imports nothing of agent/*, directly or through
// another package, so everything that publishes or reads an event can
// import it.
func TestLeaf(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil && runtime.GOOS == "windows" {
		t.Skip("runs go list, and the Go toolchain is not in the Windows (Wine) environment; CI runs this guard on Linux")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/roomrelay/roomrelay/agent") && dep != "github.com/roomrelay/roomrelay/agent/events" {
			t.Errorf("agent/events depends on %s", dep)
		}
	}
}
