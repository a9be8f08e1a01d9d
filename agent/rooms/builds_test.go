package rooms

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestAppBuildRecords: a record is replaced by the next smoke-run of the
// same app, read back with its content hash, and the table keeps at most
// the bound (the record checked longest ago goes first).
func TestAppBuildRecords(t *testing.T) {
	defer func(n int) { appBuildBound = n }(appBuildBound)
	appBuildBound = 3
	s := newStore(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		b := Build{State: BuildOK, Phase: "done", Summary: "rendered", CheckedAt: t0.Add(time.Duration(i) * time.Minute)}
		if err := s.RecordAppBuild(ctx, fmt.Sprintf("app_%d", i), "r1", fmt.Sprintf("%064d", i), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RecordAppBuild(ctx, "app_4", "r1", fmt.Sprintf("%064d", 44), Build{State: BuildFailed, CheckedAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordAppBuild(ctx, "app_9", "r1", "", Build{State: "weird"}); err == nil {
		t.Fatal("an unknown build state was recorded")
	}
	for i, want := range []bool{false, false, true, true, true} {
		b, ok, err := s.AppBuildOf(ctx, fmt.Sprintf("app_%d", i))
		if err != nil || ok != want {
			t.Fatalf("app_%d: kept %v (%v), want %v", i, ok, err, want)
		}
		if i == 4 && (b.State != BuildFailed || b.ContentHash != fmt.Sprintf("%064d", 44) || b.RoomID != "r1" || !b.CheckedAt.Equal(t0.Add(time.Hour))) {
			t.Fatalf("app_4 not replaced by its last run: %+v", b)
		}
	}
}
