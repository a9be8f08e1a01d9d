package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfiles starts the profiles o asks for; the returned func stops
// them and writes the files.
func startProfiles(o options) (func() error, error) {
	var cpu *os.File
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("cpu profile: %w", err)
		}
		cpu = f
	}
	if o.blockProfile != "" {
		// Every blocking event of at least 1 µs: the chains' waits are tens of µs.
		runtime.SetBlockProfileRate(1000)
	}
	if o.mutexProfile != "" {
		runtime.SetMutexProfileFraction(1)
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		write := func(name, path string) {
			if path == "" {
				return
			}
			f, err := os.Create(path)
			if err != nil {
				errs = append(errs, err)
				return
			}
			errs = append(errs, pprof.Lookup(name).WriteTo(f, 0), f.Close())
		}
		write("block", o.blockProfile)
		write("mutex", o.mutexProfile)
		runtime.SetBlockProfileRate(0)
		runtime.SetMutexProfileFraction(0)
		return errors.Join(errs...)
	}, nil
}
