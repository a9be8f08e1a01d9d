package hub

import (
	"log/slog"
	"testing"
)

// TestKeepRoomFullBucketDoesNotGrow (#29 "also seen"): a bucket full at
// its own bound, restarted, kept twice what it held, so each restart
// doubled it; now it keeps its bound. A smaller budget, or an upgrade
// from larger reservations, still keeps room for what a bucket holds.
func TestKeepRoomFullBucketDoesNotGrow(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	const share = 16 << 20
	have := streamSize{used: share, max: share} // full
	for restart := range 5 {
		got := keepRoom("KV_rr_oauth_clients", share, have, log)
		if got != share {
			t.Fatalf("restart %d of a full bucket: MaxBytes %d, want %d (its bound)", restart+1, got, int64(share))
		}
		have.max = got
	}
	// The budget halved under a bucket holding 12 MiB of 16: it keeps 16.
	if got := keepRoom("KV_x", 8<<20, streamSize{used: 12 << 20, max: 16 << 20}, log); got != 16<<20 {
		t.Errorf("a smaller budget: %d, want the bucket's own 16 MiB", got)
	}
	// An old, larger reservation holding 40 MiB: room for twice that, within it.
	if got := keepRoom("KV_x", 16<<20, streamSize{used: 40 << 20, max: 1 << 30}, log); got != 80<<20 {
		t.Errorf("an upgrade from a larger reservation: %d, want %d", got, 80<<20)
	}
	if got := keepRoom("KV_x", 16<<20, streamSize{}, log); got != 16<<20 {
		t.Errorf("a new bucket: %d", got)
	}
}
