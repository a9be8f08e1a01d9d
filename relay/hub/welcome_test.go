package hub

import (
	"testing"

	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestWelcomeMeansOnlineAndRoutable: an agent holding welcome reads online
// and gets a command sent at once, with no wait in between: the hub sends
// welcome only after the route and the presence write (session.setup).
// Ten devices, so a welcome sent before presence would show.
func TestWelcomeMeansOnlineAndRoutable(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	for range 10 {
		dev, tok := th.enroll("p1")
		a := dialAgent(t, th.wsURL(), tok, dev)
		if p := th.presence(dev); p.State != hubapi.StateOnline {
			t.Fatalf("right after welcome %s reads %q, want online", dev, p.State)
		}
		a.serve(echoHandler)
		th.roundTrip(dev)
	}
}
