package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
)

// TestGuardVerdictsFollowThePolicy: a command the guard allowed is allowed
// again from its verdict, but only under the same policy and for the same
// arguments; a reloaded policy that hides the room refuses it at once, and
// the rate limit still counts every command.
func TestGuardVerdictsFollowThePolicy(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{ConfigDir: filepath.Join(dir, "c"), StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-x", Token: "t"}
	d, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	policy := func(rooms, rate string) *allowlist.Policy {
		p, err := allowlist.Parse([]byte("project p1\n  enabled yes\n  commands read_room\n  rooms " + rooms + "\n  rate " + rate + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := t.Context()
	read := func(args string) error {
		return d.guard(ctx, &relay.Command{ID: "c", ProjectID: "p1", Name: relay.CmdReadRoom, Args: []byte(args)})
	}
	d.policy.Store(policy("room-1 room-2", "100000/min burst 1000"))
	for range 2 {
		if err := read(`{"room_id":"room-1"}`); err != nil {
			t.Fatal(err)
		}
	}
	if !d.verdicts.allowed(d.policy.Load(), verdictKey{"p1", relay.CmdReadRoom, `{"room_id":"room-1"}`}) {
		t.Fatal("an allowed command left no verdict: the test would prove nothing")
	}
	// Other arguments are decided on their own: the schema refuses these.
	if err := read(`{"room_id":"room-1","extra":1}`); !isCode(err, relay.CodeInvalidArgs) {
		t.Fatalf("extra argument: %v", err)
	}
	// The owner takes room-1 off the list: the next read is refused.
	d.policy.Store(policy("room-2", "100000/min burst 1000"))
	if err := read(`{"room_id":"room-1"}`); !isCode(err, relay.CodeNotFound) {
		t.Fatalf("after the policy hid the room: %v", err)
	}
	// The rate limit counts commands allowed from a verdict too.
	d.policy.Store(policy("room-2", "1/min burst 2"))
	var limited error
	for range 3 {
		limited = read(`{"room_id":"room-2"}`)
	}
	if !isCode(limited, relay.CodeRateLimited) {
		t.Fatalf("third read within a burst of 2: %v", limited)
	}
}

func isCode(err error, code relay.Code) bool {
	var re *relay.Error
	return errors.As(err, &re) && re.Code == code
}

// TestVerdictsAreBounded: at most maxVerdicts are kept, and none with
// arguments over maxVerdictArgs.
func TestVerdictsAreBounded(t *testing.T) {
	t.Parallel()
	var v verdicts
	p := allowlist.New()
	for i := range maxVerdicts + 10 {
		v.remember(p, verdictKey{"p", "c", fmt.Sprint(i)})
	}
	if len(v.ok) != maxVerdicts {
		t.Fatalf("%d verdicts kept, bound %d", len(v.ok), maxVerdicts)
	}
	big := verdictKey{"p", "c", string(make([]byte, maxVerdictArgs+1))}
	v = verdicts{}
	v.remember(p, big)
	if v.allowed(p, big) {
		t.Fatal("a verdict for arguments over the bound was kept")
	}
}
