//go:build !unix

package hub

import "time"

func raiseFileLimit() {}

// processCPU is not measured off unix.
func processCPU() time.Duration { return 0 }
