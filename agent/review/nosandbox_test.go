//go:build agentonly

package review

import "testing"

// The device build has no worker side to make the test binary a sandbox
// worker: its browser test runs the page without a checker.
func browserChecker(*testing.T) Checker { return nil }
