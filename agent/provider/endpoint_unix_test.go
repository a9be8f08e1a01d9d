//go:build unix

package provider

import (
	"testing"

	"github.com/roomrelay/roomrelay/agent/localapi"
)

// endpointFor is where localapi.Listen puts the endpoint for state dir dir.
func endpointFor(_ testing.TB, dir string) localapi.Endpoint {
	p, _, _ := localapi.SocketPath(localapi.ListenConfig{StateDir: dir})
	return localapi.Endpoint{Transport: localapi.TransportUnix, Path: p}
}
