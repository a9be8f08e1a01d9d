package worker

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestWorkerEnvironmentAndFDs checks that a worker starts with an empty
// environment and holds no descriptor of the parent beyond its pipes.
func TestWorkerEnvironmentAndFDs(t *testing.T) {
	secret, err := os.Create(filepath.Join(t.TempDir(), "parent-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer secret.Close()
	t.Setenv("ROOMRELAY_TEST_SECRET", "do-not-leak")
	p := newTestPool(t, nil)
	if res := smoke(t, p, exampleFiles(t)); !res.OK {
		t.Fatal(res.Summary())
	}
	pids := p.Stats().WorkerPIDs
	if len(pids) != 1 {
		t.Fatalf("workers %v", pids)
	}
	dir := "/proc/" + strconv.Itoa(pids[0])
	env, err := os.ReadFile(dir + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if len(env) != 0 {
		t.Errorf("worker environment is not empty: %q", env)
	}
	fds, err := os.ReadDir(dir + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		target, _ := os.Readlink(dir + "/fd/" + fd.Name())
		n, _ := strconv.Atoi(fd.Name())
		isPipe := strings.HasPrefix(target, "pipe:")
		// The Go runtime opens its own: epoll, wakeup pipe, cgroup CPU quota files.
		own := isPipe || strings.HasPrefix(target, "anon_inode:") || target == "/dev/null" || strings.HasPrefix(target, "/sys/fs/cgroup/")
		if (n <= 2 && !isPipe) || !own {
			t.Errorf("worker fd %d → %s", n, target)
		}
	}
	if raceEnabled {
		return // no RLIMIT_DATA in race builds
	}
	limits, err := os.ReadFile(dir + "/limits")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`Max data size\s+268435456\s+268435456`).Match(limits) {
		t.Errorf("RLIMIT_DATA not set:\n%s", limits)
	}
}
