package localapi

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkStatusRoundTrip is one GET status over the unix socket with a
// kept-alive connection (the store's pending count included); it reports
// the p50 and p99 of the iterations.
func BenchmarkStatusRoundTrip(b *testing.B) {
	ta := startAPI(b, nil)
	defer ta.stop()
	ctx := context.Background()
	var st StatusResponse
	durs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if _, err := ta.client.Do(ctx, "GET", "status", nil, &st, nil); err != nil {
			b.Fatal(err)
		}
		durs = append(durs, time.Since(t0))
	}
	slices.Sort(durs)
	if len(durs) > 0 {
		b.ReportMetric(float64(durs[len(durs)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds()), "p99-µs")
	}
}
