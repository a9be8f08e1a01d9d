package provider

import (
	"testing"

	"github.com/roomrelay/roomrelay/agent/localapi"
)

// endpointFor is where localapi.Listen puts the endpoint for state dir dir.
func endpointFor(t testing.TB, dir string) localapi.Endpoint {
	p, err := localapi.PipeName(localapi.ListenConfig{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return localapi.Endpoint{Transport: localapi.TransportNpipe, Path: p}
}
