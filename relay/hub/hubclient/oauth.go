package hubclient

import (
	"context"
	"net/http"
	"net/url"

	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The OAuth calls: device approval with a device token, and the
// operator's grants, clients and approvers with the admin token.

// OAuthApprovalRequest reads what a browser asks the device's owner to
// approve (the code shown on the consent page).
func (c *Client) OAuthApprovalRequest(ctx context.Context, deviceToken, code string) (*hubapi.OAuthApprovalRequest, error) {
	var out hubapi.OAuthApprovalRequest
	if err := c.do(ctx, http.MethodGet, "/v1/oauth/device-approvals/"+url.PathEscape(code), deviceToken, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DecideOAuth approves or denies it with the device token.
func (c *Client) DecideOAuth(ctx context.Context, deviceToken, code string, d hubapi.OAuthDecision) (*hubapi.OAuthDecisionResult, error) {
	var out hubapi.OAuthDecisionResult
	if err := c.do(ctx, http.MethodPost, "/v1/oauth/device-approvals/"+url.PathEscape(code), deviceToken, d, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// OAuthGrants lists OAuth grants, of project or all.
func (c *Client) OAuthGrants(ctx context.Context, project string) ([]hubapi.OAuthGrant, error) {
	var out hubapi.OAuthGrantList
	p := "/v1/oauth/grants"
	if project != "" {
		p += "?project=" + url.QueryEscape(project)
	}
	if err := c.do(ctx, http.MethodGet, p, c.Token, nil, &out); err != nil {
		return nil, err
	}
	return out.Grants, nil
}

// RevokeOAuthGrant revokes a grant on every hub node.
func (c *Client) RevokeOAuthGrant(ctx context.Context, id string) (*hubapi.OAuthGrant, error) {
	var out hubapi.OAuthGrant
	if err := c.do(ctx, http.MethodPost, "/v1/oauth/grants/"+url.PathEscape(id)+"/revoke", c.Token, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// OAuthClients lists the registered OAuth clients.
func (c *Client) OAuthClients(ctx context.Context) ([]hubapi.OAuthClient, error) {
	var out hubapi.OAuthClientList
	if err := c.do(ctx, http.MethodGet, "/v1/oauth/clients", c.Token, nil, &out); err != nil {
		return nil, err
	}
	return out.Clients, nil
}

// ForgetOAuthClient deletes a registration and revokes its grants; it
// returns how many grants it revoked.
func (c *Client) ForgetOAuthClient(ctx context.Context, id string) (int, error) {
	var out struct {
		Revoked int `json:"grants_revoked"`
	}
	if err := c.do(ctx, http.MethodDelete, "/v1/oauth/clients/"+url.PathEscape(id), c.Token, nil, &out); err != nil {
		return 0, err
	}
	return out.Revoked, nil
}

// AddApprover adds an approver and returns a one-time login link.
func (c *Client) AddApprover(ctx context.Context, req hubapi.ApproverRequest) (*hubapi.ApproverLogin, error) {
	var out hubapi.ApproverLogin
	if err := c.do(ctx, http.MethodPost, "/v1/oauth/approvers", c.Token, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Approvers lists the approvers, removed ones included.
func (c *Client) Approvers(ctx context.Context) ([]hubapi.Approver, error) {
	var out hubapi.ApproverList
	if err := c.do(ctx, http.MethodGet, "/v1/oauth/approvers", c.Token, nil, &out); err != nil {
		return nil, err
	}
	return out.Approvers, nil
}

// RemoveApprover ends an approver's sessions and login links.
func (c *Client) RemoveApprover(ctx context.Context, id string) (*hubapi.Approver, error) {
	var out hubapi.Approver
	if err := c.do(ctx, http.MethodPost, "/v1/oauth/approvers/"+url.PathEscape(id)+"/remove", c.Token, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ApproverLoginLink issues a new one-time login link for an approver.
func (c *Client) ApproverLoginLink(ctx context.Context, id string) (*hubapi.ApproverLogin, error) {
	var out hubapi.ApproverLogin
	if err := c.do(ctx, http.MethodPost, "/v1/oauth/approvers/"+url.PathEscape(id)+"/login-link", c.Token, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
