package oauth

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"

	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// Approval from an enrolled device: the consent page shows a short code;
// `roomrelay oauth approve CODE` (or the desktop app through the agent's
// local API) reads the request and decides it with the device token. The
// grant is bound to that device and one of its projects.

var (
	errUnknownCode = &hub.Error{Status: http.StatusNotFound, Code: apiNotFound,
		Message: "no pending approval has this code (mistyped, expired after a few minutes, or already decided): start again in the browser"}
	errDecided = &hub.Error{Status: http.StatusConflict, Code: apiConflict, Message: "this request was already decided"}
)

// pendingByCode finds the request a user code names, for dev: within the
// bounds on guessing (guess.go).
func (s *Server) pendingByCode(r *http.Request, dev *hubapi.DeviceSelf) (*pendingRec, uint64, error) {
	if err := s.guesses.allow(dev.DeviceID); err != nil {
		s.m.deviceGuesses.WithLabelValues("device_limited").Inc()
		return nil, 0, err
	}
	code, ok := normalizeUserCode(r.PathValue("code"))
	if !ok {
		s.guesses.miss(dev.DeviceID, "")
		return nil, 0, errUnknownCode
	}
	if s.guesses.dead(code) {
		s.guesses.miss(dev.DeviceID, code)
		s.m.deviceGuesses.WithLabelValues("code_dead").Inc()
		return nil, 0, errCodeGuessed
	}
	uk := userCodeKey(code)
	e, err := s.st.Get(r.Context(), uk.t, uk.k)
	if notFound(err) {
		s.guesses.miss(dev.DeviceID, code)
		s.m.deviceGuesses.WithLabelValues("unknown").Inc()
		return nil, 0, errUnknownCode
	}
	if err != nil {
		return nil, 0, unavailable("read the approval", err)
	}
	p, rev, err := getRec[pendingRec](r.Context(), s.st, requestKey(string(e.Value)))
	if notFound(err) {
		return nil, 0, errUnknownCode
	}
	if err != nil {
		return nil, 0, unavailable("read the approval", err)
	}
	if s.cfg.Now().After(p.ExpiresAt) {
		return nil, 0, errUnknownCode
	}
	return p, rev, nil
}

func (s *Server) handleDeviceGet(w http.ResponseWriter, r *http.Request, dev *hubapi.DeviceSelf) error {
	p, _, err := s.pendingByCode(r, dev)
	if err != nil {
		return err
	}
	if p.Decided != statePending {
		return errDecided
	}
	host := redirectShown(p.RedirectURI)
	if u, err := url.Parse(p.RedirectURI); err == nil && u.Host != "" {
		host = u.Host
	}
	code, _ := normalizeUserCode(r.PathValue("code"))
	writeDeviceJSON(w, http.StatusOK, hubapi.OAuthApprovalRequest{Code: code, ClientID: p.Client, ClientName: p.ClientName, ClientVerified: p.ClientHost != "",
		RedirectURI: p.RedirectURI, RedirectHost: host, Scope: p.Scope, Projects: dev.Projects,
		RequestedFrom: p.Addr, UserAgent: p.UserAgent, ExpiresAt: p.ExpiresAt})
	return nil
}

func (s *Server) handleDevicePost(w http.ResponseWriter, r *http.Request, dev *hubapi.DeviceSelf) error {
	var d hubapi.OAuthDecision
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<10)).Decode(&d); err != nil {
		return &hub.Error{Status: http.StatusBadRequest, Code: apiInvalidRequest, Message: `the body must be {"approve":true|false,"project":"P","scope":"read|write"}`}
	}
	p, rev, err := s.pendingByCode(r, dev)
	if err != nil {
		return err
	}
	if p.Decided != statePending {
		return errDecided
	}
	out := hubapi.OAuthDecisionResult{Approved: d.Approve}
	if d.Approve {
		project := d.Project
		if project == "" && len(dev.Projects) == 1 {
			project = dev.Projects[0]
		}
		switch {
		case project == "":
			return &hub.Error{Status: http.StatusBadRequest, Code: apiInvalidRequest,
				Message: "this device is enrolled for several projects: name one (--project)"}
		case !slices.Contains(dev.Projects, project):
			return &hub.Error{Status: http.StatusForbidden, Code: apiForbidden,
				Message: "this device is not enrolled for project " + project + ", so it cannot approve access to it"}
		}
		scope := hubapi.ScopeRead
		switch d.Scope {
		case "", hubapi.ScopeRead:
		case hubapi.ScopeWrite:
			if p.Scope != hubapi.ScopeWrite {
				return &hub.Error{Status: http.StatusBadRequest, Code: apiInvalidRequest, Message: "the client did not ask to propose apps; approve read only"}
			}
			scope = hubapi.ScopeWrite
		default:
			return &hub.Error{Status: http.StatusBadRequest, Code: apiInvalidRequest, Message: "scope must be read or write"}
		}
		p.Approval = &approval{Project: project, Scope: scope, Device: dev.DeviceID, By: dev.DeviceID, Via: "device"}
		p.Decided = stateApproved
		out.Project, out.Scope, out.Device = project, scope, dev.DeviceID
	} else {
		p.Decided = stateDenied
	}
	s.pending.acted(p.ID)
	if err := putRec(r.Context(), s.st, requestKey(p.ID), p, rev); err != nil {
		if isConflict(err) {
			return errDecided
		}
		return unavailable("record the decision", err)
	}
	s.log.Info("oauth request decided on a device", "device", dev.DeviceID, "client", p.Client, "approved", d.Approve,
		"project", out.Project, "scope", out.Scope, "decided_via", "device")
	writeDeviceJSON(w, http.StatusOK, out)
	return nil
}

func writeDeviceJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }
