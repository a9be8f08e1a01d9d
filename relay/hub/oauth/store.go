package oauth

import (
	"context"
	"time"

	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The records of the store (keys.go says where each lives).

type clientRec struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	RedirectURIs []string  `json:"redirect_uris"`
	CreatedAt    time.Time `json:"created_at"`
	LastUsed     time.Time `json:"last_used,omitzero"`
	// Host is the host that published a client ID metadata document (the
	// client is that URL, never stored); "" for a registered client.
	Host string `json:"-"`
}

// approval is who approved what, carried from the consent to the grant.
type approval struct {
	Project string `json:"project"`
	Scope   string `json:"scope"`            // hubapi scope
	Device  string `json:"device,omitempty"` // bound to this device
	By      string `json:"by"`               // approver id or device id
	Via     string `json:"via"`              // "approver" or "device"
}

// Pending request states.
const (
	statePending  = ""
	stateApproved = "approved" // by a device; the browser's wait page collects the code
	stateDenied   = "denied"
	stateDone     = "done" // a code was issued (or the denial redirected): single use
)

type pendingRec struct {
	ID           string    `json:"id"`
	Client       string    `json:"client"`
	ClientName   string    `json:"client_name"`
	ClientHost   string    `json:"client_host,omitempty"` // the metadata document's host (CIMD); "": self-registered
	RedirectURI  string    `json:"redirect_uri"`
	State        string    `json:"state,omitempty"`
	Challenge    string    `json:"challenge"`
	Resource     string    `json:"resource"`
	Scope        string    `json:"scope"` // what the client asked for (hubapi scope)
	BrowserHash  string    `json:"browser_hash"`
	CSRF         string    `json:"csrf"`
	UserCodeHash string    `json:"user_code_hash"`
	Addr         string    `json:"addr,omitempty"`
	UserAgent    string    `json:"user_agent,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	ExpiresAt    time.Time `json:"expires_at"`
	Decided      string    `json:"decided,omitempty"`
	Approval     *approval `json:"approval,omitempty"`
}

type codeRec struct {
	Client      string    `json:"client"`
	ClientName  string    `json:"client_name"`
	RedirectURI string    `json:"redirect_uri"`
	Challenge   string    `json:"challenge"`
	Resource    string    `json:"resource"`
	Approval    approval  `json:"approval"`
	ExpiresAt   time.Time `json:"expires_at"`
	Used        bool      `json:"used,omitempty"`
	Grant       string    `json:"grant,omitempty"` // what the first exchange created: a replay revokes it
}

// maxLiveTokens bounds the access and refresh tokens kept per grant: an
// older one is deleted when a newer one is issued.
const maxLiveTokens = 8

type grantRec struct {
	ID          string    `json:"id"`
	Client      string    `json:"client"`
	ClientName  string    `json:"client_name"`
	Project     string    `json:"project"`
	Scope       string    `json:"scope"`
	Device      string    `json:"device,omitempty"`
	ApprovedBy  string    `json:"approved_by"`
	ApprovedVia string    `json:"approved_via"`
	Resource    string    `json:"resource"`
	CreatedAt   time.Time `json:"created_at"`
	LastUsed    time.Time `json:"last_used,omitzero"`
	Revoked     bool      `json:"revoked,omitempty"`
	RevokedAt   time.Time `json:"revoked_at,omitzero"`
	RevokedWhy  string    `json:"revoked_why,omitempty"`
	Access      []string  `json:"access,omitempty"`  // key suffixes of live access tokens, newest last
	Refresh     []string  `json:"refresh,omitempty"` // same for refresh tokens
	Rotated     []string  `json:"rotated,omitempty"` // hashes of the last rotated refresh tokens: a late reuse revokes
}

func (g *grantRec) view() hubapi.OAuthGrant {
	return hubapi.OAuthGrant{ID: g.ID, ClientID: g.Client, ClientName: g.ClientName, Project: g.Project, Scope: g.Scope,
		Device: g.Device, ApprovedBy: g.ApprovedBy, ApprovedVia: g.ApprovedVia, CreatedAt: g.CreatedAt, LastUsed: g.LastUsed,
		Revoked: g.Revoked, RevokedAt: g.RevokedAt, RevokedWhy: g.RevokedWhy}
}

type accessRec struct {
	Grant     string    `json:"grant"`
	Scope     string    `json:"scope"`
	Audience  string    `json:"aud"`
	ExpiresAt time.Time `json:"exp"`
}

type refreshRec struct {
	Grant     string    `json:"grant"`
	Scope     string    `json:"scope"`
	IssuedAt  time.Time `json:"issued_at"`
	ExpiresAt time.Time `json:"exp"`
	RotatedAt time.Time `json:"rotated_at,omitzero"`
}

type approverRec struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Projects  []string  `json:"projects"`
	MaxScope  string    `json:"max_scope"`
	CreatedAt time.Time `json:"created_at"`
	Removed   bool      `json:"removed,omitempty"`
}

func (a *approverRec) view() hubapi.Approver {
	return hubapi.Approver{ID: a.ID, Name: a.Name, Projects: a.Projects, MaxScope: a.MaxScope, CreatedAt: a.CreatedAt, Removed: a.Removed}
}

type loginRec struct {
	Approver  string    `json:"approver"`
	ExpiresAt time.Time `json:"exp"`
}

type sessionRec struct {
	Approver  string    `json:"approver"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"exp"`
}

// revokeGrant marks a grant revoked; every access token of it fails from
// the next request on (verification reads the grant). A grant that does
// not exist yet is created revoked: a code replay can race the first
// exchange, which then fails to create it.
func (s *Server) revokeGrant(ctx context.Context, id, why string) error {
	now := s.cfg.Now().UTC()
	g, err := update(ctx, s.st, grantKey(id), func(g *grantRec) error {
		if g.Revoked {
			return errSkip
		}
		g.Revoked, g.RevokedAt, g.RevokedWhy = true, now, why
		return nil
	})
	if notFound(err) {
		err = createRec(ctx, s.st, grantKey(id), grantRec{ID: id, Revoked: true, RevokedAt: now, RevokedWhy: why, CreatedAt: now}, 0)
		if isConflict(err) { // created meanwhile: revoke that
			return s.revokeGrant(ctx, id, why)
		}
		if err != nil {
			return unavailable("revoke the grant", err)
		}
		s.log.Info("oauth grant revoked before it existed", "grant", id, "why", why)
		return nil
	}
	if err != nil {
		return unavailable("revoke the grant", err)
	}
	// The token keys are only a cleanup: the grant's flag already refuses them.
	for _, k := range g.Access {
		_ = del(ctx, s.st, accessKeyOf(k), 0)
	}
	for _, k := range g.Refresh {
		_ = del(ctx, s.st, refreshKeyOf(k), 0)
	}
	s.log.Info("oauth grant revoked", "grant", id, "why", why)
	s.m.revocations.Inc()
	return nil
}
