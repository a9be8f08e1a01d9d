package oauth

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

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
	return &hub.Error{Status: http.StatusBadRequest, Code: "invalid_request", Message: msg}
}

var (
	errNoGrant    = &hub.Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such OAuth grant"}
	errNoClient   = &hub.Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such OAuth client"}
	errNoApprover = &hub.Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such approver"}
)

// listJSON reads every record under prefix (a bounded bucket).
func listJSON[T any](ctx context.Context, kv jetstream.KeyValue, filter string) ([]*T, error) {
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil && !jetstreamNoKeys(err) {
		return nil, hub.Unavailable("list", err)
	}
	if lister == nil {
		return nil, nil
	}
	defer lister.Stop()
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	var out []*T
	for _, k := range keys {
		v, _, err := hub.GetJSON[T](ctx, kv, k)
		if notFound(err) {
			continue
		}
		if err != nil {
			return nil, hub.Unavailable("list", err)
		}
		out = append(out, v)
	}
	return out, nil
}

func jetstreamNoKeys(err error) bool { return err == jetstream.ErrNoKeysFound }

// Grants lists the grants (of project, or all), newest first.
func (s *Server) Grants(ctx context.Context, project string) ([]hubapi.OAuthGrant, error) {
	b, err := s.kv()
	if err != nil {
		return nil, err
	}
	gs, err := listJSON[grantRec](ctx, b.Grants, "g.*")
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
	b, err := s.kv()
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(id, "gr-") || len(id) > 40 {
		return nil, errNoGrant
	}
	if _, _, err := hub.GetJSON[grantRec](ctx, b.Grants, "g."+id); notFound(err) {
		return nil, errNoGrant
	}
	if err := s.revokeGrant(ctx, id, why); err != nil {
		return nil, err
	}
	g, _, err := hub.GetJSON[grantRec](ctx, b.Grants, "g."+id)
	if err != nil {
		return nil, hub.Unavailable("read the grant", err)
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
	b, err := s.kv()
	if err != nil {
		return err
	}
	cs, err := listJSON[clientRec](r.Context(), b.Clients, "c.*")
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
	b, err := s.kv()
	if err != nil {
		return err
	}
	if !strings.HasPrefix(id, "rrcl-") || len(id) > 40 {
		return errNoClient
	}
	if _, err := b.Clients.Get(ctx, "c."+id); notFound(err) {
		return errNoClient
	}
	if err := b.Clients.Purge(ctx, "c."+id); err != nil {
		return hub.Unavailable("forget the client", err)
	}
	gs, err := listJSON[grantRec](ctx, b.Grants, "g.*")
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
		if !hub.ValidProject(p) {
			return invalid("project must be 1–128 characters of letters, digits, '.', '_', ':', '-'")
		}
	}
	switch req.MaxScope {
	case "":
		req.MaxScope = hubapi.ScopeWrite
	case hubapi.ScopeRead, hubapi.ScopeWrite:
	default:
		return invalid("max_scope must be read or write")
	}
	b, err := s.kv()
	if err != nil {
		return err
	}
	a := &approverRec{ID: newID("ap-"), Name: name, Projects: slices.Compact(slices.Sorted(slices.Values(req.Projects))),
		MaxScope: req.MaxScope, CreatedAt: s.cfg.Now().UTC()}
	if _, err := b.Approvers.Create(r.Context(), "a."+a.ID, hub.MustJSON(a)); err != nil {
		return hub.Unavailable("store the approver", err)
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
	b, err := s.kv()
	if err != nil {
		return nil, err
	}
	tok := newSecret(PrefixLogin)
	exp := s.cfg.Now().UTC().Add(s.cfg.LoginTTL)
	if _, err := b.Flow.Create(ctx, "l."+hashSecret("login", tok), hub.MustJSON(loginRec{Approver: a.ID, ExpiresAt: exp})); err != nil {
		return nil, hub.Unavailable("store the login link", err)
	}
	return &hubapi.ApproverLogin{Approver: a.view(), LoginURL: s.issuer + PathLogin + "?t=" + tok, ExpiresAt: exp}, nil
}

func (s *Server) approverByID(ctx context.Context, id string) (*approverRec, error) {
	b, err := s.kv()
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(id, "ap-") || len(id) > 40 {
		return nil, errNoApprover
	}
	a, _, err := hub.GetJSON[approverRec](ctx, b.Approvers, "a."+id)
	if notFound(err) {
		return nil, errNoApprover
	}
	if err != nil {
		return nil, hub.Unavailable("read the approver", err)
	}
	return a, nil
}

func (s *Server) handleLoginLink(w http.ResponseWriter, r *http.Request) error {
	a, err := s.approverByID(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if a.Removed {
		return &hub.Error{Status: http.StatusConflict, Code: "removed", Message: "this approver was removed; add them again"}
	}
	login, err := s.loginLink(r.Context(), a)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, login)
	return nil
}

func (s *Server) handleApprovers(w http.ResponseWriter, r *http.Request) error {
	b, err := s.kv()
	if err != nil {
		return err
	}
	as, err := listJSON[approverRec](r.Context(), b.Approvers, "a.*")
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
	b, err := s.kv()
	if err != nil {
		return err
	}
	a, err := update(r.Context(), b.Approvers, "a."+r.PathValue("id"), func(a *approverRec) error {
		if a.Removed {
			return errSkip
		}
		a.Removed = true
		return nil
	})
	if err != nil {
		return hub.Unavailable("remove the approver", err)
	}
	writeJSON(w, http.StatusOK, a.view())
	return nil
}
