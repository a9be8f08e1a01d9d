//go:build !agentonly

package sandbox

import (
	"encoding/json"
	"testing"
)

func TestSmokeExampleInProcess(t *testing.T) {
	res := smokeInProcess(t, exampleFiles(t))
	js, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("%s", js)
	if !res.OK {
		t.Fatalf("example failed: %s", res.Summary())
	}
}
