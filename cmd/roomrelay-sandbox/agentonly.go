//go:build agentonly

package main

import (
	"fmt"
	"os"
)

// The worker side of the sandbox is left out of the agentonly flavour (that
// is the point of the tag); this stub keeps `go build -tags agentonly ./...`
// building the whole module, and says what to do if it is run.
func main() {
	fmt.Fprintln(os.Stderr, "roomrelay-sandbox: this binary was built with -tags agentonly, which leaves the sandbox out; build it without the tag: go build ./cmd/roomrelay-sandbox")
	os.Exit(2)
}
