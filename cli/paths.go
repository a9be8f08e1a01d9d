package cli

import (
	"flag"

	"github.com/roomrelay/roomrelay/agent/device"
)

// pathFlags adds --home to a command. With --home DIR (or ROOMRELAY_HOME) all
// three directories live below DIR, which is what tests and the demo use.
func pathFlags(fs *flag.FlagSet, e *Env) func() (device.Paths, error) {
	home := fs.String("home", e.Getenv("ROOMRELAY_HOME"), "keep config, state and data below this `dir` (env ROOMRELAY_HOME)")
	return func() (device.Paths, error) { return device.ResolvePaths(*home, e.Getenv) }
}

// deviceExit maps a device workflow's failure to the exit code it gets.
var deviceExit = map[device.Kind]int{
	device.KindFailed:      ExitFailure,
	device.KindUsage:       ExitUsage,
	device.KindNotEnrolled: ExitNotEnrolled,
	device.KindUnavailable: ExitUnavailable,
	device.KindRefused:     ExitFailure,
}
