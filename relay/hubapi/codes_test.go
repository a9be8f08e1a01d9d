package hubapi

import (
	"testing"

	"github.com/roomrelay/roomrelay/relay"
)

// TestHubCodesDoNotShadowRelays: a code of relay's closed set takes its
// status from relay's table only, never from a second row here.
func TestHubCodesDoNotShadowRelays(t *testing.T) {
	t.Parallel()
	for code, status := range hubCodeStatus {
		if relay.Code(code).Valid() {
			t.Errorf("%s is in relay's closed set and has a second status %d here", code, status)
		}
		if Status(code) != status {
			t.Errorf("Status(%s) = %d, want %d", code, Status(code), status)
		}
	}
	for _, c := range relay.Codes() {
		if Status(string(c)) != c.HTTPStatus() {
			t.Errorf("Status(%s) = %d, relay's table says %d", c, Status(string(c)), c.HTTPStatus())
		}
	}
}
