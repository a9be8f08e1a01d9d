package hubapi

import "time"

// The OAuth authorization server's API bodies (relay/hub/oauth): device
// approval with a device token, and the operator's admin calls.

// CodeOAuthOff is the error code of every OAuth path on a hub that serves
// no OAuth (no --public-url and not on loopback, or --oauth=false).
const CodeOAuthOff = "oauth_off"

// PrefixOAuthAccess begins every OAuth access token: the MCP front picks
// its verifier by it and the authorization server issues it.
const PrefixOAuthAccess = "rro_"

// The scopes as MCP clients see them (the OAuth server grants them, the
// MCP front checks them); write implies read. A client token's own scopes
// are ScopeRead and ScopeWrite.
const (
	OAuthScopeRead  = "rooms:read"
	OAuthScopeWrite = "rooms:write"
)

// OAuthApprovalRequest is GET /v1/oauth/device-approvals/{code}: what a
// browser asks the device's owner to approve.
type OAuthApprovalRequest struct {
	Code           string    `json:"code"`
	ClientID       string    `json:"client_id"`
	ClientName     string    `json:"client_name"`
	ClientVerified bool      `json:"client_verified"` // false: self-registered, the name is what the client said; true: from a client ID metadata document (client_id is its URL) on a host the operator allowed
	RedirectURI    string    `json:"redirect_uri"`
	RedirectHost   string    `json:"redirect_host"`
	Scope          string    `json:"scope"`    // what the client asked for: read or write (write implies read)
	Projects       []string  `json:"projects"` // the device's projects, the ones it may approve for
	RequestedFrom  string    `json:"requested_from,omitempty"`
	UserAgent      string    `json:"user_agent,omitempty"`
	ExpiresAt      time.Time `json:"expires_at"`
}

// OAuthDecision is the body of POST /v1/oauth/device-approvals/{code}.
// Project may be empty for a device enrolled for one project; Scope is
// read unless write is asked for (and the client asked for it).
type OAuthDecision struct {
	Approve bool   `json:"approve"`
	Project string `json:"project,omitempty"`
	Scope   string `json:"scope,omitempty"`
}

// OAuthDecisionResult is the answer to an OAuthDecision.
type OAuthDecisionResult struct {
	Approved bool   `json:"approved"`
	Project  string `json:"project,omitempty"`
	Scope    string `json:"scope,omitempty"`
	Device   string `json:"device,omitempty"` // the grant is bound to this device
}

// OAuthGrant is one grant in GET /v1/oauth/grants.
type OAuthGrant struct {
	ID          string    `json:"id"`
	ClientID    string    `json:"client_id"`
	ClientName  string    `json:"client_name"`
	Project     string    `json:"project"`
	Scope       string    `json:"scope"`
	Device      string    `json:"device,omitempty"`
	ApprovedBy  string    `json:"approved_by"`
	ApprovedVia string    `json:"approved_via"` // approver or device
	CreatedAt   time.Time `json:"created_at"`
	LastUsed    time.Time `json:"last_used,omitzero"`
	Revoked     bool      `json:"revoked,omitempty"`
	RevokedAt   time.Time `json:"revoked_at,omitzero"`
	RevokedWhy  string    `json:"revoked_why,omitempty"`
}

// OAuthGrantList is GET /v1/oauth/grants.
type OAuthGrantList struct {
	Grants []OAuthGrant `json:"grants"`
}

// OAuthClient is one registered client in GET /v1/oauth/clients.
type OAuthClient struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	RedirectURIs []string  `json:"redirect_uris"`
	CreatedAt    time.Time `json:"created_at"`
	LastUsed     time.Time `json:"last_used,omitzero"`
}

// OAuthClientList is GET /v1/oauth/clients.
type OAuthClientList struct {
	Clients []OAuthClient `json:"clients"`
}

// ApproverRequest is the body of POST /v1/oauth/approvers.
type ApproverRequest struct {
	Name     string   `json:"name"`
	Projects []string `json:"projects"`
	MaxScope string   `json:"max_scope,omitempty"` // read or write (default write)
}

// Approver is one person who may approve OAuth clients on the consent page.
type Approver struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Projects  []string  `json:"projects"`
	MaxScope  string    `json:"max_scope"`
	CreatedAt time.Time `json:"created_at"`
	Removed   bool      `json:"removed,omitempty"`
}

// ApproverLogin is an approver with a one-time login link (shown once).
type ApproverLogin struct {
	Approver  Approver  `json:"approver"`
	LoginURL  string    `json:"login_url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ApproverList is GET /v1/oauth/approvers.
type ApproverList struct {
	Approvers []Approver `json:"approvers"`
}
