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
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
	path, strategy                  string
	calls, lost, cards, dups, early int
	dupReplies, retried             int // duplicate=true answers; proposals that needed a retry
}

// proposeFunc makes one proposal attempt; lost reports a response that
// never arrived (the caller retries).
type proposeFunc func(room, name string, files map[string]string, key string) (dup, lost bool)

// TestLostResponses is the seed's table through the real relay, over the
// HTTP API and over MCP: N proposals, 5% of responses lost after the hub
// and agent acted. Retrying with the content-derived key gives N cards and
// no duplicates; so does a fresh random key per attempt now, since the
// device returns the pending proposal with the same content (content
// dedupe). Nothing is in the launcher before approval in any run.
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
	tok := clientToken(t, h, "proj-a", hubapi.ScopeWrite)

	var rows []lossRow
	for _, path := range []string{"HTTP API", "MCP"} {
		for _, strategy := range []string{"random key per attempt", "content-derived key"} {
			room := fmt.Sprintf("room-%d", len(rows))
			emptyRoom(t, dv, "proj-a", room)
			proxy := startLossyProxy(t, h.URL(), 0.05, seed)
			var propose proposeFunc
			if path == "MCP" {
				eventually(t, room+" in the directory", func() bool {
					rs, err := h.Rooms(context.Background(), "proj-a")
					return err == nil && slices.ContainsFunc(rs, func(r hubapi.DirectoryRoom) bool { return r.RoomID == room })
				})
				propose = mcpProposer(t, proxy.URL(), tok.Token)
			} else {
				propose = httpProposer(t, proxy.URL(), dv.id)
			}
			row := lossRow{path: path, strategy: strategy}
			for i := range n {
				name := fmt.Sprintf("App %04d", i)
				files := map[string]string{"src/App.tsx": fmt.Sprintf("export default function App() { return <p>%d</p> }\n", i)}
				for attempt := 0; ; attempt++ {
					if attempt == 10 {
						t.Fatalf("%s %s: proposal %d failed 10 times", path, strategy, i)
					}
					key := relay.SnippetKey(room, name, files)
					if strategy != "content-derived key" {
						key = randomKey()
					}
					row.calls++
					dup, lost := propose(room, name, files, key)
					if lost {
						if attempt == 0 {
							row.retried++
						}
						continue
					}
					if dup {
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
			// Decline the room's cards so the next row starts under the
			// project's pending bound (at most MaxPending wait per project).
			for _, p := range ps {
				if _, err := dv.d.Store().DeclineProposal(context.Background(), p.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
	}

	t.Logf("%d proposals, 5%% of responses lost after the hub answered (seed %d):", n, seed)
	t.Logf("| path | key strategy | calls | lost responses | owner cards | duplicates | in launcher before approval |")
	t.Logf("|---|---|---|---|---|---|---|")
	for _, r := range rows {
		t.Logf("| %s | %s | %d | %d | %d | %d | %d |", r.path, r.strategy, r.calls, r.lost, r.cards, r.dups, r.early)
	}
	for _, r := range rows {
		// MCP counts lost initialize requests too (a new session after a
		// drop), so only the HTTP rows tie calls to lost responses exactly.
		if r.cards != n || r.dups != 0 || r.dupReplies != r.retried || r.lost == 0 || (r.path == "HTTP API" && r.calls != n+r.lost) {
			t.Errorf("%s, %s: %+v, want %d cards, 0 duplicates, a duplicate answer for each retried proposal", r.path, r.strategy, r, n)
		}
		if r.early != 0 {
			t.Errorf("%s, %s: %d apps in the launcher before any approval", r.path, r.strategy, r.early)
		}
	}
}

// httpProposer proposes through the admin HTTP API.
func httpProposer(t *testing.T, base, dev string) proposeFunc {
	// A transport of its own, so a dropped connection is never reused.
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cl := hubclient.New(base, adminToken)
	cl.HTTP = &http.Client{Transport: tr, Timeout: 20 * time.Second}
	return func(room, name string, files map[string]string, key string) (bool, bool) {
		raw, _ := json.Marshal(map[string]any{"room_id": room, "name": name, "files": files, "idempotency_key": key})
		// No command id: each attempt is a new command, so only the
		// idempotency key or the content can make a retry a duplicate.
		res, _, err := cl.Command(context.Background(), dev, hubapi.CommandRequest{ProjectID: "proj-a",
			Name: relay.CmdProposeRoomSnippetApp, Args: raw, TimeoutMS: 10000})
		if err != nil {
			return false, true
		}
		return decodeProposal(t, res).Duplicate, false
	}
}

// mcpProposer proposes with the go-sdk client; after a lost response it
// connects a new session, as a client whose connection broke does.
func mcpProposer(t *testing.T, base, token string) proposeFunc {
	var cs *mcp.ClientSession
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: hubclient.Bearer{Token: token, Base: tr}, Timeout: 20 * time.Second}
	return func(room, name string, files map[string]string, key string) (bool, bool) {
		ctx := context.Background()
		if cs == nil {
			c := mcp.NewClient(&mcp.Implementation{Name: "lossy", Version: "test"}, nil)
			s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
			if err != nil {
				return false, true
			}
			cs = s
			t.Cleanup(func() { s.Close() })
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: relay.CmdProposeRoomSnippetApp,
			Arguments: map[string]any{"room_id": room, "name": name, "files": files, "idempotency_key": key}})
		if err != nil {
			cs.Close()
			cs = nil
			return false, true
		}
		var out struct {
			Duplicate bool `json:"duplicate"`
		}
		b, _ := json.Marshal(res.StructuredContent)
		if res.IsError || json.Unmarshal(b, &out) != nil {
			t.Fatalf("propose over MCP: %s", resultText(res))
		}
		return out.Duplicate, false
	}
}

func randomKey() string {
	b := make([]byte, 16)
	_, _ = crand.Read(b)
	return "uuid-" + hex.EncodeToString(b)
}
