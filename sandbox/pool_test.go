package sandbox

import (
	"strings"
	"testing"
)

func TestPoolRunsExample(t *testing.T) {
	p := newTestPool(t, nil)
	for i := 0; i < 3; i++ {
		res := smoke(t, p, exampleFiles(t))
		if !res.OK {
			t.Fatalf("run %d: %s", i, res.Summary())
		}
		if res.Render == nil || res.Render.Elements["button"] != 3 || res.Clicks != 3 {
			t.Fatalf("run %d: unexpected summary %+v clicks %d", i, res.Render, res.Clicks)
		}
	}
	st := p.Stats()
	if st.Spawned != 1 {
		t.Errorf("spawned %d workers for 3 sequential runs, want 1", st.Spawned)
	}
	if !strings.Contains(p.Limits(), "heap watchdog") {
		t.Errorf("limits not reported: %q", p.Limits())
	}
	t.Logf("limits: %s; stats %+v", p.Limits(), st)
}
