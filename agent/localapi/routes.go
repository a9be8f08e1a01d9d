package localapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
)

//go:embed openapi.json
var openapiDoc []byte

// OpenAPI is the embedded OpenAPI 3.1 document of the API.
func OpenAPI() []byte { return openapiDoc }

// route is one documented route (TestEveryRouteIsDocumented compares the
// table with openapi.json).
type route struct {
	method, path string // path below Prefix, as openapi.json names it
	h            func(s *Server) http.HandlerFunc
}

var routeTable = []route{
	{"GET", "/status", func(s *Server) http.HandlerFunc { return s.getStatus }},
	{"GET", "/events", func(s *Server) http.HandlerFunc { return s.getEvents }},
	{"GET", "/openapi.json", func(s *Server) http.HandlerFunc { return serveOpenAPI }},
	{"GET", "/audit", func(s *Server) http.HandlerFunc { return s.getAudit }},
	{"GET", "/projects", func(s *Server) http.HandlerFunc { return s.getProjects }},
	{"PUT", "/projects/{id}", func(s *Server) http.HandlerFunc { return s.putProject }},
	{"POST", "/projects/{id}/enable", func(s *Server) http.HandlerFunc { return s.enableProject }},
	{"POST", "/projects/{id}/disable", func(s *Server) http.HandlerFunc { return s.disableProject }},
	{"GET", "/proposals", func(s *Server) http.HandlerFunc { return s.listProposals }},
	{"GET", "/proposals/{id}", func(s *Server) http.HandlerFunc { return s.showProposal }},
	{"POST", "/proposals/{id}/check", func(s *Server) http.HandlerFunc { return s.checkProposal }},
	{"POST", "/proposals/{id}/approve", func(s *Server) http.HandlerFunc { return s.approveProposal }},
	{"POST", "/proposals/{id}/decline", func(s *Server) http.HandlerFunc { return s.declineProposal }},
	{"GET", "/policy/provider", func(s *Server) http.HandlerFunc { return s.getProviderSelection }},
	{"PUT", "/policy/provider", func(s *Server) http.HandlerFunc { return s.putProviderSelection }},
	{"GET", "/oauth/{code}", func(s *Server) http.HandlerFunc { return s.getOAuth }},
	{"POST", "/oauth/{code}", func(s *Server) http.HandlerFunc { return s.decideOAuth }},
	// Mounted for any method: the websocket upgrade is a GET, and the
	// provider's handler answers the rest.
	{"GET", "/provider", func(s *Server) http.HandlerFunc { return s.serveProvider }},
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapiDoc)
}

func (s *Server) serveProvider(w http.ResponseWriter, r *http.Request) {
	if s.cfg.ProviderHandler == nil {
		writeError(w, apiErr(CodeUnavailable, providerUnavailableTx))
		return
	}
	s.cfg.ProviderHandler.ServeHTTP(w, r)
}

func (s *Server) routes() {
	m := http.NewServeMux()
	for _, rt := range routeTable {
		pattern := rt.method + " " + Prefix + strings.TrimPrefix(rt.path, "/")
		if rt.path == "/provider" {
			pattern = Prefix + "provider"
		}
		m.HandleFunc(pattern, rt.h(s))
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiErr(CodeNotFound, fmt.Sprintf("no route %s %s (see %sopenapi.json)", r.Method, relay.Clip(r.URL.Path, 200), Prefix)))
	})
	s.mux = m
}

// APIInfo, StatusResponse (GET status) and Snapshot (the snapshot line's
// data) are agent/events' types: a snapshot carries the status.
type (
	APIInfo        = events.APIInfo
	StatusResponse = events.StatusResponse
	Snapshot       = events.Snapshot
)

// statusNow builds the status; a store that cannot be read leaves the count
// at -1 rather than failing the whole status.
func (s *Server) statusNow(ctx context.Context) StatusResponse {
	st := s.cfg.Status()
	st.Notes = nonNilStrings(st.Notes)
	r := StatusResponse{Status: st, API: APIInfo{Version: APIVersion, Min: APIMinVersion}, BootID: s.events.BootID()}
	if s.cfg.Provider != nil {
		r.Provider = s.cfg.Provider.ProviderState()
	}
	r.PendingProposals = -1
	if s.cfg.Proposals != nil {
		if ps, err := s.cfg.Proposals.ListProposals(ctx, rooms.ProposalFilter{State: rooms.ProposalPending}); err == nil {
			r.PendingProposals = len(ps)
		}
	}
	return r
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.statusNow(r.Context()))
}

func (s *Server) snapshot(ctx context.Context) Snapshot {
	st := s.statusNow(ctx)
	snap := Snapshot{Status: st, Provider: st.Provider, PendingProposals: []string{}}
	if _, rev, err := s.readPolicy(); err == nil {
		snap.ProjectsRevision = rev
	}
	if s.cfg.Proposals != nil {
		if ps, err := s.cfg.Proposals.ListProposals(ctx, rooms.ProposalFilter{State: rooms.ProposalPending}); err == nil {
			for _, p := range ps {
				snap.PendingProposals = append(snap.PendingProposals, p.ID)
			}
		}
	}
	return snap
}

// eventBatch bounds how many ring entries one wake-up copies.
const eventBatch = 128

// getEvents streams events as newline-delimited JSON: optionally a
// snapshot first (initial=1), then every event after since (or after now),
// filtered by types; a resync line (then a snapshot) when since is no
// longer in the ring or names another boot; a ping line every PingEvery.
func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var types map[string]bool
	if t := q.Get("types"); t != "" {
		types = map[string]bool{}
		for _, x := range strings.Split(t, ",") {
			types[strings.TrimSpace(x)] = true
		}
	}
	wake, pos := s.events.subscribe()
	defer s.events.unsubscribe(wake)
	resync := ""
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, apiErr(CodeInvalidArgs, "since must be a sequence number from an earlier event line"))
			return
		}
		if b := q.Get("boot_id"); b != "" && b != s.events.BootID() {
			resync = "the agent restarted (boot id " + s.events.BootID() + ", was " + relay.Clip(b, 64) + ")"
		} else if _, ok := s.events.since(n, 0); !ok {
			resync = fmt.Sprintf("event %d is no longer held (the ring keeps the last %d)", n+1, len(s.events.ring))
		} else {
			pos = n
		}
	}
	ctx := r.Context()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	// Send the headers now: a client waits for them before it reads.
	if rc.Flush() != nil {
		return
	}
	enc := json.NewEncoder(w)
	write := func(e Event) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := enc.Encode(e); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	meta := func(p events.Payload) bool {
		data, _ := events.Data(p)
		return write(Event{Seq: pos, BootID: s.events.BootID(), Time: s.cfg.Now().UTC(), Type: p.EventType(), Data: data})
	}
	if resync != "" {
		if !meta(events.Resync{Reason: resync}) || !meta(s.snapshot(ctx)) {
			return
		}
	} else if q.Get("initial") == "1" || q.Get("initial") == "true" {
		if !meta(s.snapshot(ctx)) {
			return
		}
	}
	ping := time.NewTicker(s.cfg.PingEvery)
	defer ping.Stop()
	for {
		evs, ok := s.events.since(pos, eventBatch)
		if !ok {
			// This reader fell a whole ring behind.
			pos = s.events.Last()
			if !meta(events.Resync{Reason: "this stream fell behind the ring"}) || !meta(s.snapshot(ctx)) {
				return
			}
			continue
		}
		for _, e := range evs {
			pos = e.Seq
			if types != nil && !types[e.Type] {
				continue
			}
			if !write(e) {
				return
			}
		}
		if len(evs) == eventBatch {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-ping.C:
			if !meta(events.Ping{}) {
				return
			}
		}
	}
}

// AuditOutcome is one line of GET audit: what ran, where, how it ended and
// how long it took. Never arguments.
type AuditOutcome struct {
	Seq        uint64    `json:"seq"`
	Time       time.Time `json:"time"`
	Command    string    `json:"command"`
	Project    string    `json:"project"`
	Room       string    `json:"room,omitempty"`
	Outcome    string    `json:"outcome"` // ok, the error code, or denied:code
	DurationMS int64     `json:"duration_ms"`
}

const (
	defaultAuditLimit = 50
	maxAuditLimit     = 500
)

func (s *Server) getAudit(w http.ResponseWriter, r *http.Request) {
	limit := defaultAuditLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxAuditLimit {
			writeError(w, apiErr(CodeInvalidArgs, fmt.Sprintf("limit must be 1 to %d", maxAuditLimit)))
			return
		}
		limit = n
	}
	if s.cfg.Audit == nil {
		writeError(w, apiErr(CodeUnavailable, "this agent keeps no audit log"))
		return
	}
	es, err := s.cfg.Audit.Query(audit.Filter{Limit: limit})
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	out := make([]AuditOutcome, 0, len(es))
	for _, e := range slices.Backward(es) {
		out = append(out, AuditOutcome{Seq: e.Seq, Time: e.Time.UTC(), Command: e.Command, Project: e.Project,
			Room: e.Room, Outcome: outcome(e), DurationMS: e.DurationMS})
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": out})
}

// outcome sums up an audit entry: "ok", the error code of a command that
// ran and failed, or "denied:" and the refusal's code.
func outcome(e audit.Entry) string {
	switch {
	case e.Decision == audit.Denied && e.ErrorCode != "":
		return "denied:" + e.ErrorCode
	case e.Decision == audit.Denied:
		return "denied"
	case e.Decision == audit.Note:
		return "note"
	case e.ErrorCode != "":
		return e.ErrorCode
	}
	return "ok"
}
