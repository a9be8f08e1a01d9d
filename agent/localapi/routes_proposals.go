package localapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/review"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
)

// Decision channels recorded with every decision (decided_via).
const (
	ViaApp = "app"
	ViaCLI = "cli"
	ViaWeb = "web"
)

// ProposalsResponse is GET proposals: proposals without their files.
type ProposalsResponse struct {
	Proposals []rooms.Proposal `json:"proposals"`
}

func (s *Server) proposals(w http.ResponseWriter) bool {
	if s.cfg.Proposals == nil {
		writeError(w, apiErr(CodeUnavailable, "this agent has no local proposal store"))
		return false
	}
	return true
}

func (s *Server) listProposals(w http.ResponseWriter, r *http.Request) {
	if !s.proposals(w) {
		return
	}
	q := r.URL.Query()
	f := rooms.ProposalFilter{ProjectID: q.Get("project"), RoomID: q.Get("room"), State: q.Get("state")}
	switch f.State {
	case "":
		f.State = rooms.ProposalPending
	case "all":
		f.State = ""
	case rooms.ProposalPending, rooms.ProposalApproved, rooms.ProposalDeclined:
	default:
		writeError(w, apiErr(CodeInvalidArgs, "state must be pending, approved, declined or all"))
		return
	}
	ps, err := s.cfg.Proposals.ListProposals(r.Context(), f)
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	if ps == nil {
		ps = []rooms.Proposal{}
	}
	writeJSON(w, http.StatusOK, ProposalsResponse{Proposals: ps})
}

// HiddenReport is what review.ScanHidden found in one text: counts of
// control, bidi and invisible characters and the distinct ones (U+XXXX).
type HiddenReport struct {
	Control   int      `json:"control"`
	Bidi      int      `json:"bidi"`
	Invisible int      `json:"invisible"`
	Runes     []string `json:"runes"`
	More      bool     `json:"more,omitempty"`
	Summary   string   `json:"summary"`
}

func hiddenReport(text string) *HiddenReport {
	h := review.ScanHidden(text)
	if !h.Any() {
		return nil
	}
	rep := &HiddenReport{Control: h.Control, Bidi: h.Bidi, Invisible: h.Invisible, More: h.More, Summary: h.String()}
	for _, r := range h.Runes {
		rep.Runes = append(rep.Runes, fmt.Sprintf("U+%04X", r))
	}
	return rep
}

// ProposalFile is one proposed file in full, with what the review page
// shows about it.
type ProposalFile struct {
	Path    string        `json:"path"`
	Content string        `json:"content"`
	Bytes   int           `json:"bytes"`
	Lines   int           `json:"lines"`
	Hidden  *HiddenReport `json:"hidden,omitempty"`
}

// ProposalDetail is GET proposals/{id}: every file in full, in path order,
// and the hidden-character report (HiddenWarning is the banner's text).
type ProposalDetail struct {
	rooms.Proposal
	Files         []ProposalFile `json:"files"`
	NameHidden    *HiddenReport  `json:"name_hidden,omitempty"`
	HasHidden     bool           `json:"has_hidden"`
	HiddenWarning string         `json:"hidden_warning,omitempty"`
}

func (s *Server) showProposal(w http.ResponseWriter, r *http.Request) {
	if !s.proposals(w) {
		return
	}
	d, err := s.cfg.Proposals.GetProposal(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	out := ProposalDetail{Proposal: d.Proposal, Files: []ProposalFile{}, NameHidden: hiddenReport(d.Name)}
	out.HasHidden = out.NameHidden != nil
	for _, path := range d.SortedPaths() {
		c := d.Files[path]
		f := ProposalFile{Path: path, Content: c, Bytes: len(c), Lines: review.LineCount(c), Hidden: hiddenReport(c)}
		out.HasHidden = out.HasHidden || f.Hidden != nil
		out.Files = append(out.Files, f)
	}
	if out.HasHidden {
		out.HiddenWarning = review.HiddenWarning
	}
	writeJSON(w, http.StatusOK, out)
}

// CheckResponse is POST proposals/{id}/check: the sandbox's verdict on a
// pending snippet (ok, failed, or none when the check could not run).
type CheckResponse struct {
	ProposalID  string `json:"proposal_id"`
	ContentHash string `json:"content_hash"`
	State       string `json:"state"`
	Summary     string `json:"summary"`
}

func (s *Server) checkProposal(w http.ResponseWriter, r *http.Request) {
	if !s.proposals(w) {
		return
	}
	d, err := s.cfg.Proposals.GetProposal(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	switch {
	case d.State != rooms.ProposalPending:
		writeError(w, apiErr(CodeConflict, "the proposal is "+d.State+"; only a pending proposal is checked"))
		return
	case d.Kind != rooms.SourceSnippet:
		writeError(w, apiErr(CodeConflict, review.TextRepoNote+" Review the repository code before approving."))
		return
	case s.cfg.Checker == nil:
		writeError(w, apiErr(CodeUnavailable, "this agent runs no sandbox"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.CheckTimeout)
	defer cancel()
	res := CheckResponse{ProposalID: d.ID, ContentHash: d.ContentHash}
	summary, ok, err := s.cfg.Checker.Check(ctx, d.Files)
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		res.State, res.Summary = "none", fmt.Sprintf("the sandbox check did not finish within %s", s.cfg.CheckTimeout)
	case err != nil:
		res.State, res.Summary = "none", err.Error()
	case ok:
		res.State, res.Summary = "ok", summary
	default:
		res.State, res.Summary = "failed", summary
	}
	writeJSON(w, http.StatusOK, res)
}

// DecideRequest is the body of approve (ContentHash required) and decline.
// DecidedVia says who decided: app (default) or cli.
type DecideRequest struct {
	ContentHash string `json:"content_hash,omitempty"`
	DecidedVia  string `json:"decided_via,omitempty"`
}

// DecisionResponse answers approve and decline. Repeated is true when the
// proposal already was in that state (the call changed nothing).
type DecisionResponse struct {
	Proposal   rooms.Proposal `json:"proposal"`
	State      string         `json:"state"`
	DecidedVia string         `json:"decided_via"`
	Repeated   bool           `json:"repeated"`
}

func (s *Server) approveProposal(w http.ResponseWriter, r *http.Request) {
	s.decide(w, r, rooms.ProposalApproved)
}

func (s *Server) declineProposal(w http.ResponseWriter, r *http.Request) {
	s.decide(w, r, rooms.ProposalDeclined)
}

// checkVia defaults an empty decided_via to app and refuses anything but
// app or cli (a decision's audit line names who decided).
func checkVia(via *string) *APIError {
	switch *via {
	case "":
		*via = ViaApp
	case ViaApp, ViaCLI:
	default:
		return apiErr(CodeInvalidArgs, "decided_via must be app or cli")
	}
	return nil
}

// decide approves or declines. Approving needs the content hash the owner
// was shown: another hash is hash_mismatch and the proposal stays pending.
// Asking again for the state a proposal is already in answers 200 with
// repeated (for approve only with the same hash); asking for the other
// state is conflict. Each decision is audited with decided_via and the
// peer, published as proposal_decided, and handed to Decided.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, want string) {
	if !s.proposals(w) {
		return
	}
	var req DecideRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if e := checkVia(&req.DecidedVia); e != nil {
		writeError(w, e)
		return
	}
	approve := want == rooms.ProposalApproved
	if approve && req.ContentHash == "" {
		writeError(w, apiErr(CodeInvalidArgs, "content_hash is required: the hash of the content the owner reviewed (GET proposals/{id})"))
		return
	}
	ctx, id := r.Context(), r.PathValue("id")
	// The proposal keeps decided_via: the daemon, which may see the store
	// change before this handler publishes, leaves the event to it.
	p, err := s.cfg.Proposals.Decide(ctx, id, rooms.Decision{Approve: approve, ContentHash: req.ContentHash, Via: req.DecidedVia})
	switch {
	case errors.Is(err, rooms.ErrContentChanged):
		writeError(w, apiErr(CodeHashMismatch, "the proposal's content hash is not "+relay.Clip(req.ContentHash, 80)+": review it again (GET proposals/"+id+"); it stays pending"))
		return
	case errors.Is(err, rooms.ErrNotPending):
		cur, gerr := s.cfg.Proposals.GetProposal(ctx, id)
		if gerr != nil {
			writeError(w, asAPIError(gerr))
			return
		}
		if cur.State != want {
			writeError(w, apiErr(CodeConflict, "the proposal was already "+cur.State))
			return
		}
		if approve && cur.ContentHash != req.ContentHash {
			writeError(w, apiErr(CodeHashMismatch, "the proposal was approved with another content hash"))
			return
		}
		writeJSON(w, http.StatusOK, DecisionResponse{Proposal: cur.Proposal, State: cur.State, DecidedVia: req.DecidedVia, Repeated: true})
		return
	case err != nil:
		writeError(w, asAPIError(err))
		return
	}
	peer, _ := PeerFrom(ctx)
	s.auditLine(audit.Entry{Command: "localapi." + map[bool]string{true: "approve", false: "decline"}[approve],
		CommandID: p.ID, Project: p.Project, Room: p.RoomID, Decision: audit.Allowed,
		Detail: peerDetail(peer, r, req.DecidedVia) + " content_hash=" + p.ContentHash})
	s.pub.Publish(events.ProposalDecided{ProposalID: p.ID, Project: p.Project, RoomID: p.RoomID,
		State: p.State, ContentHash: p.ContentHash, InstanceID: p.InstanceID, DecidedVia: p.DecidedVia, InstallState: p.InstallState})
	if s.cfg.Decided != nil {
		s.cfg.Decided(ctx, p)
	}
	writeJSON(w, http.StatusOK, DecisionResponse{Proposal: p, State: p.State, DecidedVia: req.DecidedVia})
}
