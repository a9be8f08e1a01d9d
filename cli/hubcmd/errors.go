package hubcmd

import (
	"fmt"

	"github.com/roomrelay/roomrelay/cli"
)

// usagef is a mistake in the invocation: ExitUsage, with the help.
func usagef(format string, args ...any) error {
	return &cli.ExitError{Code: cli.ExitUsage, Err: fmt.Errorf(format, args...), Usage: true}
}

// exitErr fails with code, printing err.
func exitErr(code int, err error) error { return &cli.ExitError{Code: code, Err: err} }

// silent fails with code after the command printed what it had to say.
func silent(code int) error { return &cli.ExitError{Code: code} }
