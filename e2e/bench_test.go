package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// BenchmarkCommandRoundTrip measures read_room and list_room_apps (50 apps)
// through the real hub (embedded NATS) and the real agent (SQLite store,
// policy, schema validation, fsync'd audit log, dedupe store) over loopback,
// at 1 and 50 concurrent callers. It reports p50/p99 per call.
//
//	go test -run '^$' -bench CommandRoundTrip -benchtime 2000x ./e2e
func BenchmarkCommandRoundTrip(b *testing.B) {
	h := startHub(b, hub.Config{DataDir: b.TempDir()})
	dv := enroll(b, h, "proj-a")
	if err := os.MkdirAll(dv.home+"/config", 0o700); err != nil {
		b.Fatal(err)
	}
	// A rate limit far above what the benchmark sends.
	pol := "version 1\nproject proj-a\n  enabled yes\n  commands read_room list_room_apps\n  rate 1000000/min burst 100000\n"
	if err := os.WriteFile(dv.policyPath(), []byte(pol), 0o600); err != nil {
		b.Fatal(err)
	}
	dv.start(b, h.URL())
	seedRoom(b, dv, "proj-a", "room-1")
	for i := range 49 {
		if _, err := dv.d.Store().AddApp(context.Background(), rooms.NewApp{ProjectID: "proj-a", RoomID: "room-1", Name: "app", Source: rooms.SourceRepo,
			RepositoryID: "repo", VersionID: string(rune('a' + i%26))}); err != nil {
			b.Fatal(err)
		}
	}
	waitState(b, h, dv.id, hubapi.StateOnline)
	// Enough idle connections for 50 callers: http.DefaultClient keeps 2
	// per host, and the churn would be measured instead of the hub.
	h.client.HTTP = &http.Client{Transport: &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128}}

	for _, tc := range []struct {
		name string
		cmd  string
		args string
	}{
		{"read_room", relay.CmdReadRoom, `{"room_id":"room-1"}`},
		{"list_room_apps_50", relay.CmdListRoomApps, `{"room_id":"room-1","limit":50}`},
	} {
		for _, conc := range []int{1, 50} {
			b.Run(tc.name+"/conc="+itoa(conc), func(b *testing.B) {
				lat := make([]time.Duration, b.N)
				var wg sync.WaitGroup
				next := make(chan int)
				var failed sync.Once
				for range conc {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range next {
							t := time.Now()
							res, _, err := h.client.Command(context.Background(), dv.id, hubapi.CommandRequest{ProjectID: "proj-a", Name: tc.cmd, Args: json.RawMessage(tc.args)})
							lat[i] = time.Since(t)
							if err != nil || !res.OK {
								failed.Do(func() { b.Errorf("call failed: %v %+v", err, res) })
							}
						}
					}()
				}
				b.ResetTimer()
				for i := range b.N {
					next <- i
				}
				close(next)
				wg.Wait()
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
