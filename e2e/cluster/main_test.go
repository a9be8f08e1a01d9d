//go:build linux

// Package cluster tests the hub as a multi-node service with real processes
// on loopback: three nats-server processes clustered with JetStream, three
// `roomrelay hub` processes on them with --replicas 3, a TCP load balancer
// (in the test) in front of two of the hubs for the agents, and real
// `roomrelay run` agents. Each scenario injects one fault (a NATS node or a
// hub node killed with SIGKILL, everything restarted) and checks that
// commands, enrollment, presence and stored state survive it.
//
// Linux only: children run in their own process groups with a parent-death
// signal, so nothing outlives the test binary.
package cluster

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Binaries built once by TestMain.
var (
	natsBin  string
	relayBin string
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "roomrelay-cluster-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster: temp dir:", err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		natsBin = filepath.Join(dir, "nats-server")
		relayBin = filepath.Join(dir, "roomrelay")
		// nats-server at the version go.mod pins (the hub links the same
		// module), so the cluster is what the hub was built against. No race
		// flag: the children are not under test for races, and they stay
		// light on a small machine.
		for _, b := range [][]string{
			{"build", "-o", natsBin, "github.com/nats-io/nats-server/v2"},
			{"build", "-o", relayBin, "github.com/roomrelay/roomrelay/cmd/roomrelay"},
		} {
			if out, err := exec.Command("go", b...).CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "cluster: go %v: %v\n%s", b, err, out)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}
