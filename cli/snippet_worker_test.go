package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestSandboxWorkerLookup: a binary without the worker subcommand (the
// device binary) finds its worker next to the
// binary, then in PREFIX/lib/roomrelay, honours ROOMRELAY_SANDBOX_WORKER, and
// otherwise names every place it looked.
func TestSandboxWorkerLookup(t *testing.T) {
	t.Parallel()
	prefix := t.TempDir()
	exe := filepath.Join(prefix, "bin", "roomrelay")
	name := workerBinary
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	libWorker := filepath.Join(prefix, "lib", "roomrelay", name)
	sibling := filepath.Join(prefix, "bin", name)
	write := func(p string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{}
	e := &Env{Executable: exe, Getenv: func(k string) string { return env[k] }}

	_, err := findWorkerBinary(e)
	if err == nil || !strings.Contains(err.Error(), sibling) || !strings.Contains(err.Error(), libWorker) {
		t.Fatalf("nothing installed: err = %v; want both places named", err)
	}
	write(libWorker, 0o644)
	// Windows has no execute bit to refuse by.
	if _, err := findWorkerBinary(e); err == nil && runtime.GOOS != "windows" {
		t.Fatal("a non-executable worker was accepted")
	}
	os.Chmod(libWorker, 0o755)
	if got, err := findWorkerBinary(e); err != nil || got[0] != libWorker {
		t.Fatalf("packaged layout: %v %v", got, err)
	}
	write(sibling, 0o755)
	if got, err := findWorkerBinary(e); err != nil || got[0] != sibling {
		t.Fatalf("sibling first: %v %v", got, err)
	}
	env["ROOMRELAY_SANDBOX_WORKER"] = filepath.Join(prefix, "nope")
	if _, err := findWorkerBinary(e); err == nil || !strings.Contains(err.Error(), "ROOMRELAY_SANDBOX_WORKER") {
		t.Fatalf("bad override: %v", err)
	}
	env["ROOMRELAY_SANDBOX_WORKER"] = libWorker
	if got, err := findWorkerBinary(e); err != nil || len(got) != 1 || got[0] != libWorker {
		t.Fatalf("override: %v %v", got, err)
	}
}
