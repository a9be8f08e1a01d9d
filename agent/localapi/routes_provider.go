package localapi

import (
	"fmt"
	"net/http"

	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/allowlist"
)

// ProviderSelection is GET and PUT policy/provider: the room provider the
// policy selects (app or builtin). Revision is the policy file's, also the
// ETag: send it as If-Match to change the selection.
type ProviderSelection struct {
	Provider string `json:"provider"`
	Revision string `json:"revision,omitempty"`
	Changed  bool   `json:"changed,omitempty"`
}

func (s *Server) getProviderSelection(w http.ResponseWriter, r *http.Request) {
	pol, rev, err := s.readPolicy()
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	w.Header().Set("ETag", etag(rev))
	writeJSON(w, http.StatusOK, ProviderSelection{Provider: pol.Provider(), Revision: rev})
}

// putProviderSelection selects the room provider: If-Match required (the
// ETag of GET policy/provider or GET projects, one revision), audited as
// localapi.select_provider with the caller's pid and exe, and published as
// provider_selected. Selecting what is selected changes nothing.
func (s *Server) putProviderSelection(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Provider string `json:"provider"`
	}
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.Provider != allowlist.ProviderApp && req.Provider != allowlist.ProviderBuiltin {
		writeError(w, apiErr(CodeInvalidArgs, fmt.Sprintf("provider is %q or %q", allowlist.ProviderApp, allowlist.ProviderBuiltin)))
		return
	}
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	pol, rev, err := s.readPolicy()
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	if e := matches(r, rev, true); e != nil {
		writeError(w, e)
		return
	}
	changed := pol.Provider() != req.Provider
	if changed {
		if err := pol.SetProvider(req.Provider); err != nil {
			writeError(w, apiErr(CodeInvalidArgs, err.Error()))
			return
		}
		if err := pol.Save(s.cfg.PolicyPath); err != nil {
			writeError(w, asAPIError(err))
			return
		}
		peer, _ := PeerFrom(r.Context())
		s.auditLine(audit.Entry{Command: "localapi.select_provider", Decision: audit.Allowed,
			Detail: "provider=" + req.Provider + " " + peerDetail(peer, r, "")})
		if s.cfg.PolicySaved != nil {
			s.cfg.PolicySaved(r.Context())
		}
		s.pub.Publish(events.ProviderSelected{Provider: req.Provider, PID: peer.PID, Exe: peer.Exe})
		if rev, err = s.revisionNow(); err != nil {
			writeError(w, asAPIError(err))
			return
		}
	}
	w.Header().Set("ETag", etag(rev))
	writeJSON(w, http.StatusOK, ProviderSelection{Provider: req.Provider, Revision: rev, Changed: changed})
}

// revisionNow is the revision of the policy file on disk.
func (s *Server) revisionNow() (string, error) {
	_, rev, err := s.readPolicy()
	return rev, err
}
