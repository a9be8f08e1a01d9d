package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// WorkerCommand is the hidden subcommand a sandbox worker process runs when
// the binary carries the worker side itself: cli/hubcmd registers it in the
// full roomrelay (which links sandbox/worker anyway). The device binary
// (cmd/roomrelay-agent) does not, and uses the separate workerBinary.
const WorkerCommand = "sandbox-worker"

// workerBinary is the device binary's sandbox worker (cmd/roomrelay-sandbox).
const workerBinary = "roomrelay-sandbox"

// sandboxWorker is the command line that starts a sandbox worker: this
// binary's hidden WorkerCommand when it is registered, else the separate
// worker binary (findWorkerBinary).
func sandboxWorker(e *Env) ([]string, error) {
	if _, ok := commands[WorkerCommand]; ok {
		if e.Executable == "" {
			return nil, errors.New("cannot start sandbox workers: the path of this binary is unknown")
		}
		return []string{e.Executable, WorkerCommand}, nil
	}
	return findWorkerBinary(e)
}

// workerName names the worker in messages.
func workerName() string {
	if _, ok := commands[WorkerCommand]; ok {
		return WorkerCommand
	}
	return workerBinary
}

// findWorkerBinary finds the separate worker binary: ROOMRELAY_SANDBOX_WORKER,
// else next to this binary (a build directory, a Windows install), else
// PREFIX/lib/roomrelay/ as the packages install it beside PREFIX/bin/roomrelay.
func findWorkerBinary(e *Env) ([]string, error) {
	if p := e.Getenv("ROOMRELAY_SANDBOX_WORKER"); p != "" {
		if err := isExecutable(p); err != nil {
			return nil, fmt.Errorf("ROOMRELAY_SANDBOX_WORKER: %w", err)
		}
		return []string{p}, nil
	}
	if e.Executable == "" {
		return nil, errors.New("cannot find the sandbox worker: the path of this binary is unknown")
	}
	name := workerBinary
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	dir := filepath.Dir(e.Executable)
	tried := []string{filepath.Join(dir, name), filepath.Join(filepath.Dir(dir), "lib", "roomrelay", name)}
	for _, p := range tried {
		if isExecutable(p) == nil {
			return []string{p}, nil
		}
	}
	return nil, fmt.Errorf("the sandbox worker %s is not installed (looked for %s): this is the device build, "+
		"whose worker is a separate binary; install the package again, or build it with `go build ./cmd/roomrelay-sandbox` "+
		"next to roomrelay, or set ROOMRELAY_SANDBOX_WORKER", name, strings.Join(tried, ", "))
}

func isExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || (runtime.GOOS != "windows" && fi.Mode()&0o111 == 0) {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}
