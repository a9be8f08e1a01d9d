package e2e

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// lossyProxy sits in front of the hub's HTTP API. It forwards each request,
// reads the hub's full answer (so the agent has acted), and then, for a
// seeded 5% of requests, drops the client's connection instead of answering.
type lossyProxy struct {
	target string
	rate   float64
	mu     sync.Mutex
	rng    *rand.Rand
	lost   int
	srv    *http.Server
	ln     net.Listener
	wg     sync.WaitGroup
}

func startLossyProxy(t testing.TB, target string, rate float64, seed uint64) *lossyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{target: target, rate: rate, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), ln: ln}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	p.wg.Go(func() { _ = p.srv.Serve(ln) })
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.srv.Shutdown(ctx)
		p.wg.Wait()
	})
	return p
}

func (p *lossyProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *lossyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.mu.Lock()
	drop := p.rng.Float64() < p.rate
	if drop {
		p.lost++
	}
	p.mu.Unlock()
	if drop {
		// The hub answered and the agent acted; the client never hears it.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(data)
}

type lossRow struct {
	strategy                        string
	calls, lost, cards, dups, early int
	dupReplies, retried             int // duplicate=true answers; proposals that needed a retry
}

// TestLostResponses is the seed's table through the real relay: N
// proposals, 5% of responses lost after the hub and agent acted. A client
// retrying with the content-derived key gets N cards and no duplicates; one
// using a fresh random key per attempt gets a duplicate card per lost
// response. Nothing is in the launcher before approval in either run.
func TestLostResponses(t *testing.T) {
	n := 1000
	if raceEnabled || testing.Short() {
		n = 200 // the race detector makes each call ~10× slower
	}
	const seed = 20240605
	h := startHub(t, hub.Config{DataDir: t.TempDir()})
	dv := enroll(t, h, "proj-a")
	dv.enableFast(t, "proj-a")
	dv.start(t, h.URL())
	waitState(t, h, dv.id, hubapi.StateOnline)

	var rows []lossRow
	for _, strategy := range []string{"random key per attempt", "content-derived key"} {
		room := "room-random"
		if strategy == "content-derived key" {
			room = "room-content"
		}
		emptyRoom(t, dv, "proj-a", room)
		proxy := startLossyProxy(t, h.URL(), 0.05, seed)
		// A transport of its own, so a dropped connection is never reused.
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		cl := hubclient.New(proxy.URL(), adminToken)
		cl.HTTP = &http.Client{Transport: tr, Timeout: 20 * time.Second}
		row := lossRow{strategy: strategy}
		for i := range n {
			name := fmt.Sprintf("App %04d", i)
			files := map[string]string{"src/App.tsx": fmt.Sprintf("export default function App() { return <p>%d</p> }\n", i)}
			for attempt := 0; ; attempt++ {
				if attempt == 10 {
					t.Fatalf("%s: proposal %d failed 10 times", strategy, i)
				}
				key := relay.SnippetKey(room, name, files)
				if strategy != "content-derived key" {
					key = randomKey()
				}
				raw, _ := json.Marshal(map[string]any{"room_id": room, "name": name, "files": files, "idempotency_key": key})
				row.calls++
				// No command id: each attempt is a new command, so only the
				// idempotency key can make a retry a duplicate.
				res, _, err := cl.Command(context.Background(), dv.id, hubapi.CommandRequest{ProjectID: "proj-a",
					Name: relay.CmdProposeRoomSnippetApp, Args: raw, TimeoutMS: 10000})
				if err != nil {
					if attempt == 0 {
						row.retried++
					}
					continue // response lost: retry
				}
				pr := decodeProposal(t, res)
				if pr.Duplicate {
					row.dupReplies++
				}
				break
			}
		}
		proxy.mu.Lock()
		row.lost = proxy.lost
		proxy.mu.Unlock()
		ps, err := dv.d.Store().ListProposals(context.Background(), rooms.ProposalFilter{ProjectID: "proj-a", RoomID: room, State: rooms.ProposalPending})
		if err != nil {
			t.Fatal(err)
		}
		row.cards = len(ps)
		seen := map[string]bool{}
		for _, p := range ps {
			if seen[p.Name] {
				row.dups++
			}
			seen[p.Name] = true
		}
		row.early = launcherCount(t, dv, "proj-a", room)
		rows = append(rows, row)
	}

	t.Logf("%d proposals, 5%% of responses lost after the hub answered (seed %d):", n, seed)
	t.Logf("| key strategy | calls | lost responses | owner cards | duplicates | in launcher before approval |")
	t.Logf("|---|---|---|---|---|---|")
	for _, r := range rows {
		t.Logf("| %s | %d | %d | %d | %d | %d |", r.strategy, r.calls, r.lost, r.cards, r.dups, r.early)
	}
	random, content := rows[0], rows[1]
	if content.cards != n || content.dups != 0 || content.calls != n+content.lost || content.dupReplies != content.retried {
		t.Errorf("content-derived key: %+v, want %d cards, 0 duplicates, a duplicate answer for each retried proposal", content, n)
	}
	if random.lost == 0 || random.dups != random.lost || random.cards != n+random.lost {
		t.Errorf("random key: %+v, want a duplicate card per lost response", random)
	}
	if random.early != 0 || content.early != 0 {
		t.Errorf("apps in the launcher before any approval: %d, %d", random.early, content.early)
	}
}

func randomKey() string {
	b := make([]byte, 16)
	_, _ = crand.Read(b)
	return "uuid-" + hex.EncodeToString(b)
}
