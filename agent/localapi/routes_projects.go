package localapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
)

// ProjectView is one project of GET projects: its policy, and whether the
// hub enrolled the device for it (config.json). Rooms empty: every room.
type ProjectView struct {
	allowlist.ProjectInfo
	Enrolled bool `json:"enrolled"`
}

// ProjectsResponse is GET projects. Revision is also the ETag: send it as
// If-Match to change a project.
type ProjectsResponse struct {
	Revision string        `json:"revision"`
	Projects []ProjectView `json:"projects"`
}

func (s *Server) readPolicy() (*allowlist.Policy, string, error) {
	if s.cfg.PolicyPath == "" {
		return nil, "", apiErr(CodeUnavailable, "this agent has no policy file")
	}
	return allowlist.LoadRevision(s.cfg.PolicyPath)
}

// enrolled lists the projects the hub enrolled the device for.
func (s *Server) enrolled() []string {
	if s.cfg.Enrolled == nil {
		return nil
	}
	return s.cfg.Enrolled()
}

func (s *Server) projectsView(pol *allowlist.Policy, rev string) ProjectsResponse {
	en := s.enrolled()
	out := ProjectsResponse{Revision: rev, Projects: []ProjectView{}}
	seen := map[string]bool{}
	for _, p := range pol.Projects() {
		seen[p.Project] = true
		out.Projects = append(out.Projects, ProjectView{ProjectInfo: p, Enrolled: slices.Contains(en, p.Project)})
	}
	// An enrolled project the policy does not name is shown disabled, so an
	// app can offer to enable it.
	for _, id := range en {
		if !seen[id] {
			out.Projects = append(out.Projects, ProjectView{ProjectInfo: allowlist.ProjectInfo{Project: id,
				Commands: []string{}, Rooms: []string{}, Rate: rateView(allowlist.DefaultRate)}, Enrolled: true})
		}
	}
	return out
}

func rateView(r allowlist.Rate) allowlist.RateInfo {
	return allowlist.RateInfo{Events: r.Events, PerSeconds: int(r.Per.Seconds()), Burst: r.Burst}
}

func etag(rev string) string { return `"` + rev + `"` }

func (s *Server) getProjects(w http.ResponseWriter, r *http.Request) {
	pol, rev, err := s.readPolicy()
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	w.Header().Set("ETag", etag(rev))
	writeJSON(w, http.StatusOK, s.projectsView(pol, rev))
}

// ProjectResponse answers a change: the project as it now stands and the
// file's new revision.
type ProjectResponse struct {
	Revision string      `json:"revision"`
	Project  ProjectView `json:"project"`
	Changed  bool        `json:"changed"`
}

// matches checks If-Match against the revision: required says a missing
// header is refused too.
func matches(r *http.Request, rev string, required bool) *APIError {
	im := r.Header.Get("If-Match")
	if im == "" {
		if required {
			return withStatus(apiErr(CodePreconditionFailed, "If-Match is required: send the ETag of GET projects"), http.StatusPreconditionRequired)
		}
		return nil
	}
	if im == "*" {
		return nil
	}
	for _, t := range strings.Split(im, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if strings.Trim(t, `"`) == rev {
			return nil
		}
	}
	return apiErr(CodePreconditionFailed, "the policy changed since it was read (revision "+rev+"): read it again and reapply the change")
}

// decodeBody reads a JSON body into v, refusing unknown fields: a typo in
// a policy change must not pass silently. An empty body leaves v as is.
func decodeBody(r *http.Request, v any) *APIError {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var mb *http.MaxBytesError
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case errors.As(err, &mb):
		return apiErr(CodeTooLarge, fmt.Sprintf("the body is over %d bytes", mb.Limit))
	case err != nil:
		return apiErr(CodeInvalidArgs, "body: "+err.Error())
	}
	return nil
}

// changePolicy runs one policy edit under the writer lock: read with its
// revision, check If-Match, edit, save, audit, tell the daemon.
func (s *Server) changePolicy(w http.ResponseWriter, r *http.Request, verb string, ifMatchRequired bool, edit func(*allowlist.Policy, string) error) {
	id := r.PathValue("id")
	s.policyMu.Lock()
	defer s.policyMu.Unlock()
	pol, rev, err := s.readPolicy()
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	if e := matches(r, rev, ifMatchRequired); e != nil {
		writeError(w, e)
		return
	}
	if err := edit(pol, id); err != nil {
		var re *allowlist.RuleError
		if errors.As(err, &re) {
			writeError(w, apiErr(CodeInvalidArgs, re.Msg))
			return
		}
		writeError(w, asAPIError(err))
		return
	}
	newRev := allowlist.Revision(pol.Marshal())
	changed := newRev != rev
	if changed {
		if err := pol.Save(s.cfg.PolicyPath); err != nil {
			writeError(w, asAPIError(err))
			return
		}
		peer, _ := PeerFrom(r.Context())
		s.auditLine(audit.Entry{Command: "localapi." + verb, Project: id, Decision: audit.Allowed,
			Detail: peerDetail(peer, r, "")})
		if s.cfg.PolicySaved != nil {
			s.cfg.PolicySaved(r.Context())
		}
	}
	// The revision of what is on disk now (Marshal may differ from a hand
	// edited file's bytes when nothing changed).
	_, rev, err = s.readPolicy()
	if err != nil {
		writeError(w, asAPIError(err))
		return
	}
	view := ProjectView{}
	for _, p := range s.projectsView(pol, rev).Projects {
		if p.Project == id {
			view = p
		}
	}
	w.Header().Set("ETag", etag(rev))
	writeJSON(w, http.StatusOK, ProjectResponse{Revision: rev, Project: view, Changed: changed})
}

func (s *Server) putProject(w http.ResponseWriter, r *http.Request) {
	var spec allowlist.ProjectSpec
	if e := decodeBody(r, &spec); e != nil {
		writeError(w, e)
		return
	}
	s.changePolicy(w, r, "put_project", true, func(p *allowlist.Policy, id string) error {
		return p.SetProject(id, spec)
	})
}

func (s *Server) enableProject(w http.ResponseWriter, r *http.Request) {
	var req allowlist.EnableRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	s.changePolicy(w, r, "enable", false, func(p *allowlist.Policy, id string) error {
		_, _, err := p.ApplyEnable(id, req)
		return err
	})
}

func (s *Server) disableProject(w http.ResponseWriter, r *http.Request) {
	var empty struct{}
	if e := decodeBody(r, &empty); e != nil {
		writeError(w, e)
		return
	}
	s.changePolicy(w, r, "disable", false, func(p *allowlist.Policy, id string) error {
		if _, ok := p.Project(id); !ok {
			return apiErr(CodeNotFound, fmt.Sprintf("project %q is not in the policy", relay.Clip(id, 128)))
		}
		return p.Disable(id)
	})
}

// peerDetail is an audit line's who: the peer, the client it names, and
// how the decision was made.
func peerDetail(p Peer, r *http.Request, via string) string {
	var b strings.Builder
	if via != "" {
		fmt.Fprintf(&b, "decided_via=%s ", via)
	}
	fmt.Fprintf(&b, "uid=%d pid=%d exe=%q", p.UID, p.PID, p.Exe)
	if p.SID != "" {
		fmt.Fprintf(&b, " sid=%s", p.SID)
	}
	if c := r.Header.Get(HeaderClient); c != "" {
		fmt.Fprintf(&b, " client=%q", relay.Clip(c, 100))
	}
	return b.String()
}
