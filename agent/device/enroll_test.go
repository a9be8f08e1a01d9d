package device

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/internal/testutil/testhub"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
)

// TestEnrollLifecycle: a code enrolls the device, a second project joins the
// same identity, a spent code is refused, and after a revoke the next code
// replaces the identity and removes the old token.
func TestEnrollLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := testhub.Start(t, hub.Config{}, testhub.Options{})
	p := testPaths(t)
	code := func(project string) string {
		pc, err := h.Pair(ctx, project, 0)
		if err != nil {
			t.Fatal(err)
		}
		return pc.Code
	}
	opts := func(c string) EnrollOptions {
		return EnrollOptions{Hub: h.URL(), Code: c, Name: "laptop", OS: "linux", Store: credstore.KindFile}
	}
	c1 := code("p1")
	first, err := Enroll(ctx, p, opts(c1))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := credstore.Open(ctx, credstore.KindFile, p.Config)
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := cs.Get(ctx, first.Config.DeviceID); err != nil || tok == "" {
		t.Fatalf("token not stored: %v", err)
	}
	if saved, err := LoadConfig(p); err != nil || saved.DeviceID != first.Config.DeviceID || first.Project != "p1" || first.Replaced != "" {
		t.Fatalf("first enrollment: %+v %+v %v", first, saved, err)
	}

	second, err := Enroll(ctx, p, opts(code("p2")))
	if err != nil {
		t.Fatal(err)
	}
	if second.Config.DeviceID != first.Config.DeviceID || !slices.Equal(second.Config.Projects, []string{"p1", "p2"}) ||
		!second.Config.EnrolledAt.Equal(first.Config.EnrolledAt) {
		t.Fatalf("a second project makes a second device: %+v", second.Config)
	}

	if _, err := Enroll(ctx, p, opts(c1)); KindOf(err) != KindRefused || !strings.Contains(err.Error(), "new code") {
		t.Fatalf("a spent code: %v (kind %d)", err, KindOf(err))
	}

	if _, err := h.Revoke(ctx, first.Config.DeviceID); err != nil {
		t.Fatal(err)
	}
	var notices []string
	o := opts(code("p3"))
	o.Notice = func(s string) { notices = append(notices, s) }
	third, err := Enroll(ctx, p, o)
	if err != nil {
		t.Fatal(err)
	}
	if third.Replaced != first.Config.DeviceID || third.Config.DeviceID == first.Config.DeviceID || len(notices) != 1 || !strings.Contains(notices[0], "was revoked") {
		t.Fatalf("after a revoke: %+v notices %q", third, notices)
	}
	if _, err := cs.Get(ctx, first.Config.DeviceID); !errors.Is(err, credstore.ErrNotFound) {
		t.Fatalf("the revoked identity's token is still stored: %v", err)
	}
}

// TestEnrollUnreachableHub: a hub that does not answer is a transport
// failure the caller can explain, and nothing is written.
func TestEnrollUnreachableHub(t *testing.T) {
	t.Parallel()
	p := testPaths(t)
	_, err := Enroll(context.Background(), p, EnrollOptions{Hub: "http://" + testutil.ClosedAddr(t), Code: "x", Store: credstore.KindFile})
	if KindOf(err) != KindFailed || !hubclient.Unreachable(err) {
		t.Fatalf("unreachable hub: %v (kind %d)", err, KindOf(err))
	}
	if _, err := LoadConfig(p); KindOf(err) != KindNotEnrolled {
		t.Fatalf("an identity was written: %v", err)
	}
	if _, err := Enroll(context.Background(), p, EnrollOptions{Hub: "http://x", Code: "x", Store: credstore.KindFile, CAFile: filepath.Join(p.Config, "missing.pem")}); KindOf(err) != KindUsage {
		t.Fatalf("a CA file that does not load: %v (kind %d)", err, KindOf(err))
	}
}

// TestUnenroll: an unreachable hub removes nothing; a reachable one revokes
// the device, and the token, identity and queue go while rooms, audit log
// and policy stay; --local-only does not ask the hub.
func TestUnenroll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := testhub.Start(t, hub.Config{}, testhub.Options{})
	p := testPaths(t)
	pc, err := h.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	enr, err := Enroll(ctx, p, EnrollOptions{Hub: h.URL(), Code: pc.Code, Store: credstore.KindFile})
	if err != nil {
		t.Fatal(err)
	}
	outbox := filepath.Join(p.State, agent.OutboxFile)
	if err := os.WriteFile(outbox, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}

	away := *enr.Config
	away.Hub = "http://" + testutil.ClosedAddr(t)
	if _, err := Unenroll(ctx, p, &away, false); KindOf(err) != KindUnavailable || !strings.Contains(err.Error(), "nothing was removed") {
		t.Fatalf("unreachable hub: %v (kind %d)", err, KindOf(err))
	}
	if _, err := LoadConfig(p); err != nil {
		t.Fatalf("the identity went although the hub was not told: %v", err)
	}

	r, err := Unenroll(ctx, p, enr.Config, false)
	if err != nil {
		t.Fatal(err)
	}
	if !r.HubRevoked || len(r.Removed) != 3 || len(r.Kept) != 3 {
		t.Fatalf("report %+v", r)
	}
	if d, err := h.Device(ctx, enr.Config.DeviceID); err != nil || !d.Revoked {
		t.Fatalf("the hub did not revoke the device: %+v %v", d, err)
	}
	if _, err := LoadConfig(p); KindOf(err) != KindNotEnrolled {
		t.Fatalf("identity still there: %v", err)
	}
	if _, err := os.Stat(outbox); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("queued events kept: %v", err)
	}

	// --local-only never calls the hub: the closed address is not dialled.
	if err := SaveConfig(p, &away); err != nil {
		t.Fatal(err)
	}
	r, err = Unenroll(ctx, p, &away, true)
	if err != nil || r.HubRevoked || !strings.Contains(r.HubNote, "--local-only") {
		t.Fatalf("--local-only: %+v %v", r, err)
	}
}
