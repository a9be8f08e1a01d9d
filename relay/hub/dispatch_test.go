package hub

import "testing"

// TestNewestSessionRule: whichever comes first, the kick of a newer session
// or the older session learning its epoch, the older one is superseded and
// the newer one is not; a forgotten device starts clean.
func TestNewestSessionRule(t *testing.T) {
	// Kick first (the older session was still setting up when it came).
	var n newest
	n.kicked("dev-a", 8)
	if !n.superseded("dev-a", 7) {
		t.Error("epoch 7 after kick(8): not superseded")
	}
	if n.superseded("dev-a", 8) {
		t.Error("the kicking session itself superseded")
	}
	if n.superseded("dev-b", 1) {
		t.Error("another device superseded")
	}
	// An older kick arriving late never lowers the record.
	n.kicked("dev-a", 5)
	if !n.superseded("dev-a", 7) {
		t.Error("a late kick(5) lowered the record below 8")
	}
	// A newer session after the record is not superseded.
	if n.superseded("dev-a", 9) {
		t.Error("epoch 9 superseded by kick(8)")
	}
	n.forget("dev-a")
	if n.superseded("dev-a", 1) {
		t.Error("forgotten device still remembers a kick")
	}
}
