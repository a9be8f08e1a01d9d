package worker

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/roomrelay/roomrelay/sandbox"
)

// benchCorpus is the snippet corpus shared with the Node harness in
// bench/sandbox: the standup-timer example and bench/sandbox/corpus/*.
func benchCorpus(tb testing.TB) (names []string, corpus map[string]map[string]string) {
	tb.Helper()
	dirs := map[string]string{"standup-timer": "../../examples/standup-timer"}
	entries, err := os.ReadDir("../../bench/sandbox/corpus")
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range entries {
		dirs[e.Name()] = filepath.Join("../../bench/sandbox/corpus", e.Name())
	}
	corpus = map[string]map[string]string{}
	for name, dir := range dirs {
		files, err := sandbox.ReadSnippetDir(dir)
		if err != nil {
			tb.Fatal(err)
		}
		corpus[name] = files
		names = append(names, name)
	}
	sort.Strings(names)
	return names, corpus
}

// TestCorpusPasses also pins each snippet's summary (the same figures the
// Node harness prints), so the harness's steps keep doing the same work.
func TestCorpusPasses(t *testing.T) {
	want := map[string]struct{ elements, text, clicks int }{
		"counter":       {4, 22, 2},
		"standup-timer": {12, 58, 3},
		"table":         {1207, 4373, 1},
		"todo":          {18, 80, 5},
	}
	names, corpus := benchCorpus(t)
	for _, n := range names {
		res := smokeInProcess(t, corpus[n])
		if !res.OK {
			t.Errorf("%s: %s", n, res.Summary())
			continue
		}
		t.Logf("%s: %s", n, res.Summary())
		w, ok := want[n]
		if !ok {
			t.Errorf("%s: no expected summary", n)
			continue
		}
		if res.Render.ElementCount != w.elements || res.Render.TextLength != w.text || res.Clicks != w.clicks {
			t.Errorf("%s: %d elements, %d characters, %d clicks; want %d, %d, %d",
				n, res.Render.ElementCount, res.Render.TextLength, res.Clicks, w.elements, w.text, w.clicks)
		}
	}
}

func BenchmarkTransform(b *testing.B) {
	names, corpus := benchCorpus(b)
	for _, n := range names {
		b.Run(n, func(b *testing.B) {
			for b.Loop() {
				if _, err := Build(corpus[n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSmokeRunInProcess is the engine alone: build, fresh runtime,
// React load, render, effects, clicks.
func BenchmarkSmokeRunInProcess(b *testing.B) {
	names, corpus := benchCorpus(b)
	lib := testLibraries(b)
	for _, n := range names {
		b.Run(n, func(b *testing.B) {
			for b.Loop() {
				res, _ := smokeFiles(corpus[n], Build, func(b *Bundle) (*sandbox.Result, bool) { return runBundle(lib, b, testLimits) })
				if !res.OK {
					b.Fatal(res.Summary())
				}
			}
		})
	}
}

// BenchmarkSmokeRunWarm goes through the pool to a warm worker process.
func BenchmarkSmokeRunWarm(b *testing.B) {
	names, corpus := benchCorpus(b)
	p := newTestPool(b, func(c *sandbox.Config) { c.Workers = 1; c.RecycleAfter = 1 << 30 })
	for _, n := range names {
		b.Run(n, func(b *testing.B) {
			smoke(b, p, corpus[n])
			for b.Loop() {
				if res := smoke(b, p, corpus[n]); !res.OK {
					b.Fatal(res.Summary())
				}
			}
			st := p.Stats()
			if len(st.WorkerRSS) == 1 {
				b.ReportMetric(mib(st.WorkerRSS[0]), "worker-RSS-MiB")
			}
		})
	}
}

// BenchmarkSmokeRunCold starts a new worker process for every run (spawn,
// compile React, build, run).
func BenchmarkSmokeRunCold(b *testing.B) {
	files := exampleFiles(b)
	p := newTestPool(b, func(c *sandbox.Config) { c.Workers = 1; c.RecycleAfter = 1 })
	for b.Loop() {
		if res := smoke(b, p, files); !res.OK {
			b.Fatal(res.Summary())
		}
	}
	if st := p.Stats(); st.Spawned < b.N {
		b.Fatalf("spawned %d workers for %d runs", st.Spawned, b.N)
	}
}
