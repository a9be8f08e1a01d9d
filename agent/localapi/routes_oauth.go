package localapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// OAuth device approval (docs/oauth.md): the hub's consent page shows a
// short code; a desktop app reads what asks (GET oauth/{code}) and lets its
// owner approve or deny (POST oauth/{code}). The agent calls the hub with
// its device token, the same calls as `roomrelay oauth approve CODE`
// (agent/device's OAuthRequest and DecideOAuth); the hub refuses a project
// the device is not enrolled for.

// OAuthApprover is the device's side of an MCP client's sign-in: the
// daemon hands agent/device's OAuthRequest and DecideOAuth with the
// enrolled identity. A refusal by the hub comes back as a (wrapped)
// *hubclient.APIError.
type OAuthApprover interface {
	OAuthRequest(ctx context.Context, code string) (*hubapi.OAuthApprovalRequest, error)
	DecideOAuth(ctx context.Context, code string, d hubapi.OAuthDecision) (*hubapi.OAuthDecisionResult, error)
}

// OAuthDecideRequest is the body of POST oauth/{code}: approve or deny,
// the project for a device enrolled for several, scope write to also allow
// proposing apps (only when the client asked for it), and who decided.
type OAuthDecideRequest struct {
	Approve    bool   `json:"approve"`
	Project    string `json:"project,omitempty"`
	Scope      string `json:"scope,omitempty"`
	DecidedVia string `json:"decided_via,omitempty"`
}

// OAuthDecideResponse answers POST oauth/{code}: the hub's result (the
// grant's project and scope, bound to this device) and decided_via.
type OAuthDecideResponse struct {
	hubapi.OAuthDecisionResult
	DecidedVia string `json:"decided_via"`
}

const noOAuthTx = "this agent cannot approve OAuth sign-ins (it runs without its enrolled identity)"

func (s *Server) getOAuth(w http.ResponseWriter, r *http.Request) {
	if s.cfg.OAuth == nil {
		writeError(w, apiErr(CodeUnavailable, noOAuthTx))
		return
	}
	req, err := s.cfg.OAuth.OAuthRequest(r.Context(), r.PathValue("code"))
	if err != nil {
		writeError(w, hubRefusal(err))
		return
	}
	writeJSON(w, http.StatusOK, req)
}

// decideOAuth approves or denies the code's request through the hub. Each
// decision the hub took, and each it refused, is audited with decided_via
// and the peer (uid, pid, executable).
func (s *Server) decideOAuth(w http.ResponseWriter, r *http.Request) {
	var req OAuthDecideRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if e := checkVia(&req.DecidedVia); e != nil {
		writeError(w, e)
		return
	}
	switch req.Scope {
	case "", hubapi.ScopeRead, hubapi.ScopeWrite:
	default:
		writeError(w, apiErr(CodeInvalidArgs, "scope must be read or write"))
		return
	}
	if !req.Approve && (req.Scope != "" || req.Project != "") {
		writeError(w, apiErr(CodeInvalidArgs, "a denial takes no project or scope"))
		return
	}
	if s.cfg.OAuth == nil {
		writeError(w, apiErr(CodeUnavailable, noOAuthTx))
		return
	}
	ctx, code := r.Context(), r.PathValue("code")
	res, err := s.cfg.OAuth.DecideOAuth(ctx, code, hubapi.OAuthDecision{Approve: req.Approve, Project: req.Project, Scope: req.Scope})
	peer, _ := PeerFrom(ctx)
	cmd := "localapi.oauth_deny"
	if req.Approve {
		cmd = "localapi.oauth_approve"
	}
	detail := peerDetail(peer, r, req.DecidedVia) + " code=" + relay.Clip(code, 20)
	if err != nil {
		e := hubRefusal(err)
		s.auditLine(audit.Entry{Command: cmd, Project: relay.Clip(req.Project, 100), Decision: audit.Denied, ErrorCode: e.Code,
			Detail: detail + ": " + relay.Clip(e.Message, 200)})
		writeError(w, e)
		return
	}
	s.auditLine(audit.Entry{Command: cmd, Project: res.Project, Decision: audit.Allowed,
		Detail: detail + " scope=" + res.Scope + " device=" + res.Device})
	writeJSON(w, http.StatusOK, OAuthDecideResponse{OAuthDecisionResult: *res, DecidedVia: req.DecidedVia})
}

// hubRefusal maps the hub's answer to the local API's: its refusals keep
// their message (an unknown or expired code, a project this device is not
// enrolled for, a request already decided); a hub that cannot be reached
// or refuses the device token is unavailable.
func hubRefusal(err error) *APIError {
	var he *hubclient.APIError
	if !errors.As(err, &he) {
		return apiErr(CodeUnavailable, "the hub could not be asked: "+relay.Clip(err.Error(), 300))
	}
	msg := relay.Clip(he.Message, 300)
	switch {
	case he.Status == http.StatusNotFound:
		return apiErr(CodeNotFound, msg)
	case he.Status == http.StatusForbidden:
		return apiErr(CodeForbidden, msg)
	case he.Status == http.StatusConflict:
		return apiErr(CodeConflict, msg)
	case he.Status == http.StatusBadRequest:
		return apiErr(CodeInvalidArgs, msg)
	case he.Status == http.StatusUnauthorized:
		return apiErr(CodeUnavailable, "the hub refused this device's token (revoked or unenrolled): "+msg)
	case he.Status == http.StatusTooManyRequests:
		return apiErr(CodeRateLimited, msg)
	}
	return apiErr(CodeUnavailable, fmt.Sprintf("the hub answered %d %s: %s", he.Status, strings.TrimSpace(he.Code), msg))
}
