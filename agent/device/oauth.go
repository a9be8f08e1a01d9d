package device

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/internal/tlsfiles"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// OAuth device approval: a browser's consent page shows a short code; the
// device's owner approves it here with the device token (the CLI's
// `roomrelay oauth approve CODE`, and the local API for a desktop app).
// The grant the hub then issues reaches this device's rooms only.

// OAuthRequest reads what the code's browser asks for.
func OAuthRequest(ctx context.Context, p Paths, cfg *Config, code string) (*hubapi.OAuthApprovalRequest, error) {
	cl, token, err := oauthClient(ctx, p, cfg)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	r, err := cl.OAuthApprovalRequest(cctx, token, code)
	if err != nil {
		return nil, oauthErr(err)
	}
	return r, nil
}

// DecideOAuth approves or denies the code's request.
func DecideOAuth(ctx context.Context, p Paths, cfg *Config, code string, d hubapi.OAuthDecision) (*hubapi.OAuthDecisionResult, error) {
	cl, token, err := oauthClient(ctx, p, cfg)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	r, err := cl.DecideOAuth(cctx, token, code, d)
	if err != nil {
		return nil, oauthErr(err)
	}
	return r, nil
}

func oauthClient(ctx context.Context, p Paths, cfg *Config) (*hubclient.Client, string, error) {
	cs, err := credstore.Open(ctx, cfg.CredentialStore, p.Config)
	if err != nil {
		return nil, "", fail(KindUnavailable, fmt.Errorf("the credential store (%s) holding the device token: %w", cfg.CredentialStore, err))
	}
	token, err := cs.Get(ctx, cfg.DeviceID)
	if errors.Is(err, credstore.ErrNotFound) {
		return nil, "", fail(KindNotEnrolled, fmt.Errorf("no device token is stored (%s): enroll again", cs.Where()))
	}
	if err != nil {
		return nil, "", fail(KindUnavailable, fmt.Errorf("read the device token from the %s: %w", cs.Where(), err))
	}
	hc, err := tlsfiles.HTTPClient(cfg.CAFile)
	if err != nil {
		return nil, "", fail(KindUsage, fmt.Errorf("the CA file in the device config: %w", err))
	}
	cl := hubclient.New(cfg.Hub, "")
	cl.HTTP = hc
	return cl, token, nil
}

// oauthErr sorts a hub answer: a refusal (unknown code, another project,
// decided) is KindRefused, a bad token KindNotEnrolled.
func oauthErr(err error) error {
	var ae *hubclient.APIError
	if errors.As(err, &ae) {
		switch {
		case ae.Status == http.StatusUnauthorized:
			return fail(KindNotEnrolled, fmt.Errorf("the hub refused this device's token: %w", err))
		case ae.Status/100 == 4:
			return fail(KindRefused, err)
		}
	}
	return fail(KindUnavailable, hubclient.Explain(err))
}

// OAuthApprover is OAuthRequest and DecideOAuth with the identity enrolled
// in Paths, read at each call (a re-enrollment is seen at once): what the
// running agent hands its local API (agent/localapi's OAuthApprover).
type OAuthApprover struct{ Paths Paths }

// OAuthRequest reads what the code's browser asks for.
func (a OAuthApprover) OAuthRequest(ctx context.Context, code string) (*hubapi.OAuthApprovalRequest, error) {
	cfg, err := LoadConfig(a.Paths)
	if err != nil {
		return nil, err
	}
	return OAuthRequest(ctx, a.Paths, cfg, code)
}

// DecideOAuth approves or denies the code's request.
func (a OAuthApprover) DecideOAuth(ctx context.Context, code string, d hubapi.OAuthDecision) (*hubapi.OAuthDecisionResult, error) {
	cfg, err := LoadConfig(a.Paths)
	if err != nil {
		return nil, err
	}
	return DecideOAuth(ctx, a.Paths, cfg, code, d)
}
