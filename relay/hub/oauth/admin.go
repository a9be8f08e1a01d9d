package oauth

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The operator's API (admin token): grants, clients and approvers.

func (s *Server) mountAdmin(mux *http.ServeMux, t func(http.HandlerFunc) http.Handler) {
	a := func(fn func(http.ResponseWriter, *http.Request) error) http.Handler { return t(s.hub.Admin(fn)) }
	mux.Handle("GET /v1/oauth/grants", a(s.handleGrants))
	mux.Handle("POST /v1/oauth/grants/{id}/revoke", a(s.handleGrantRevoke))
	mux.Handle("GET /v1/oauth/clients", a(s.handleClients))
	mux.Handle("DELETE /v1/oauth/clients/{id}", a(s.handleForgetClient))
	mux.Handle("POST /v1/oauth/approvers", a(s.handleApproverAdd))
	mux.Handle("GET /v1/oauth/approvers", a(s.handleApprovers))
	mux.Handle("POST /v1/oauth/approvers/{id}/remove", a(s.handleApproverRemove))
	mux.Handle("POST /v1/oauth/approvers/{id}/login-link", a(s.handleLoginLink))
}

func invalid(msg string) error {
	return &hub.Error{Status: http.StatusBadRequest, Code: apiInvalidRequest, Message: msg}
}

var (
	errNoGrant    = &hub.Error{Status: http.StatusNotFound, Code: apiNotFound, Message: "no such OAuth grant"}
	errNoClient   = &hub.Error{Status: http.StatusNotFound, Code: apiNotFound, Message: "no such OAuth client"}
	errNoApprover = &hub.Error{Status: http.StatusNotFound, Code: apiNotFound, Message: "no such approver"}
)

// Grants lists the grants (of project, or all), newest first.
func (s *Server) Grants(ctx context.Context, project string) ([]hubapi.OAuthGrant, error) {
	gs, err := listRecs[grantRec](ctx, s.st, TableGrants, grantPrefix)
	if err != nil {
		return nil, err
	}
	out := []hubapi.OAuthGrant{}
	for _, g := range gs {
		if g.Client == "" || (project != "" && g.Project != project) { // a revoked stub of a replayed code
			continue
		}
		out = append(out, g.view())
	}
	slices.SortFunc(out, func(a, b hubapi.OAuthGrant) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return out, nil
}

func (s *Server) handleGrants(w http.ResponseWriter, r *http.Request) error {
	gs, err := s.Grants(r.Context(), r.URL.Query().Get("project"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hubapi.OAuthGrantList{Grants: gs})
	return nil
}

// RevokeGrant revokes a grant on every node from its next request.
func (s *Server) RevokeGrant(ctx context.Context, id, why string) (*hubapi.OAuthGrant, error) {
	if !strings.HasPrefix(id, "gr-") || len(id) > 40 {
		return nil, errNoGrant
	}
	if _, _, err := getRec[grantRec](ctx, s.st, grantKey(id)); notFound(err) {
		return nil, errNoGrant
	}
	if err := s.revokeGrant(ctx, id, why); err != nil {
		return nil, err
	}
	g, _, err := getRec[grantRec](ctx, s.st, grantKey(id))
	if err != nil {
		return nil, unavailable("read the grant", err)
	}
	v := g.view()
	return &v, nil
}

func (s *Server) handleGrantRevoke(w http.ResponseWriter, r *http.Request) error {
	g, err := s.RevokeGrant(r.Context(), r.PathValue("id"), "revoked by the operator")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, g)
	return nil
}

func (s *Server) handleClients(w http.ResponseWriter, r *http.Request) error {
	cs, err := listRecs[clientRec](r.Context(), s.st, TableClients, clientPrefix)
	if err != nil {
		return err
	}
	out := []hubapi.OAuthClient{}
	for _, c := range cs {
		out = append(out, hubapi.OAuthClient{ID: c.ID, Name: c.Name, RedirectURIs: c.RedirectURIs, CreatedAt: c.CreatedAt, LastUsed: c.LastUsed})
	}
	slices.SortFunc(out, func(a, b hubapi.OAuthClient) int { return b.CreatedAt.Compare(a.CreatedAt) })
	writeJSON(w, http.StatusOK, hubapi.OAuthClientList{Clients: out})
	return nil
}

// handleForgetClient deletes a registration and revokes its grants.
func (s *Server) handleForgetClient(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id := r.PathValue("id")
	if !strings.HasPrefix(id, "rrcl-") || len(id) > 40 {
		return errNoClient
	}
	if _, _, err := getRec[clientRec](ctx, s.st, clientKey(id)); notFound(err) {
		return errNoClient
	}
	if err := del(ctx, s.st, clientKey(id), 0); err != nil {
		return unavailable("forget the client", err)
	}
	gs, err := listRecs[grantRec](ctx, s.st, TableGrants, grantPrefix)
	if err != nil {
		return err
	}
	n := 0
	for _, g := range gs {
		if g.Client == id && !g.Revoked {
			if err := s.revokeGrant(ctx, g.ID, "its client was forgotten"); err != nil {
				return err
			}
			n++
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"client_id": id, "grants_revoked": n})
	return nil
}

func (s *Server) handleApproverAdd(w http.ResponseWriter, r *http.Request) error {
	var req hubapi.ApproverRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<10)).Decode(&req); err != nil {
		return invalid("the body must be {\"name\":…,\"projects\":[…],\"max_scope\":\"read|write\"}")
	}
	name := strings.TrimSpace(req.Name)
	if name == "" || len(name) > maxNameLen || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return invalid("name is 1–100 bytes without control characters")
	}
	if len(req.Projects) == 0 || len(req.Projects) > 64 {
		return invalid("name 1 to 64 projects the approver may grant access to")
	}
	for _, p := range req.Projects {
		if !relay.ValidID(p) {
			return invalid("project must be " + relay.IDRule)
		}
	}
	switch req.MaxScope {
	case "":
		req.MaxScope = hubapi.ScopeWrite
	case hubapi.ScopeRead, hubapi.ScopeWrite:
	default:
		return invalid("max_scope must be read or write")
	}
	a := &approverRec{ID: newID("ap-"), Name: name, Projects: slices.Compact(slices.Sorted(slices.Values(req.Projects))),
		MaxScope: req.MaxScope, CreatedAt: s.cfg.Now().UTC()}
	if err := createRec(r.Context(), s.st, approverKey(a.ID), a, 0); err != nil {
		return unavailable("store the approver", err)
	}
	s.log.Info("oauth approver added", "approver", a.ID, "projects", a.Projects)
	login, err := s.loginLink(r.Context(), a)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, login)
	return nil
}

// loginLink issues a one-time login link for approver a.
func (s *Server) loginLink(ctx context.Context, a *approverRec) (*hubapi.ApproverLogin, error) {
	tok := newSecret(PrefixLogin)
	exp := s.cfg.Now().UTC().Add(s.cfg.LoginTTL)
	if err := createRec(ctx, s.st, loginKey(tok), loginRec{Approver: a.ID, ExpiresAt: exp}, 0); err != nil {
		return nil, unavailable("store the login link", err)
	}
	return &hubapi.ApproverLogin{Approver: a.view(), LoginURL: s.issuer + PathLogin + "?t=" + tok, ExpiresAt: exp}, nil
}

func (s *Server) approverByID(ctx context.Context, id string) (*approverRec, error) {
	if !strings.HasPrefix(id, "ap-") || len(id) > 40 {
		return nil, errNoApprover
	}
	a, _, err := getRec[approverRec](ctx, s.st, approverKey(id))
	if notFound(err) {
		return nil, errNoApprover
	}
	if err != nil {
		return nil, unavailable("read the approver", err)
	}
	return a, nil
}

func (s *Server) handleLoginLink(w http.ResponseWriter, r *http.Request) error {
	a, err := s.approverByID(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if a.Removed {
		return &hub.Error{Status: http.StatusConflict, Code: apiRemoved, Message: "this approver was removed; add them again"}
	}
	login, err := s.loginLink(r.Context(), a)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, login)
	return nil
}

func (s *Server) handleApprovers(w http.ResponseWriter, r *http.Request) error {
	as, err := listRecs[approverRec](r.Context(), s.st, TableApprovers, approverPrefix)
	if err != nil {
		return err
	}
	out := []hubapi.Approver{}
	for _, a := range as {
		out = append(out, a.view())
	}
	slices.SortFunc(out, func(a, b hubapi.Approver) int { return a.CreatedAt.Compare(b.CreatedAt) })
	writeJSON(w, http.StatusOK, hubapi.ApproverList{Approvers: out})
	return nil
}

// handleApproverRemove ends the approver's sessions (each page load reads
// the approver); the grants they approved stay until revoked.
func (s *Server) handleApproverRemove(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.approverByID(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	a, err := update(r.Context(), s.st, approverKey(r.PathValue("id")), func(a *approverRec) error {
		if a.Removed {
			return errSkip
		}
		a.Removed = true
		return nil
	})
	if err != nil {
		return unavailable("remove the approver", err)
	}
	writeJSON(w, http.StatusOK, a.view())
	return nil
}
