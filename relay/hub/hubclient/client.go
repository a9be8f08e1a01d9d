// Package hubclient is a small Go client for the roomrelay hub's HTTP API,
// used by the CLI and the demo. The request and response bodies are package
// hubapi's, which the hub server uses too.
//
// It depends only on net/http, relay and hubapi, so a program that only
// talks to a hub does not link NATS.
package hubclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/internal/tlsfiles"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// APIError is a non-2xx answer from the hub (other than a command result).
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("hub: %d %s: %s", e.Status, e.Code, e.Message)
}

// Client talks to one hub. Token is the admin token for admin calls; Enroll
// takes a device token separately.
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client // nil means http.DefaultClient
}

// New returns a client for the hub at baseURL (e.g. "http://127.0.0.1:8443").
func New(baseURL, adminToken string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: adminToken}
}

// Pair asks for a one-time pairing code for project; ttl 0 means the hub's default.
func (c *Client) Pair(ctx context.Context, project string, ttl time.Duration) (*hubapi.PairingCode, error) {
	var out hubapi.PairingCode
	req := hubapi.PairingRequest{Project: project, TTLSeconds: int(ttl / time.Second)}
	if ttl > 0 && req.TTLSeconds == 0 {
		req.TTLSeconds = 1
	}
	if err := c.do(ctx, http.MethodPost, "/v1/pairing-codes", c.Token, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Enroll exchanges a pairing code for a device id and token. With a non-empty
// existingToken the code's project is added to that device instead.
func (c *Client) Enroll(ctx context.Context, code, deviceName, os, existingToken string) (*hubapi.Enrollment, error) {
	var out hubapi.Enrollment
	req := hubapi.EnrollRequest{Code: code, DeviceName: deviceName, OS: os}
	if err := c.do(ctx, http.MethodPost, "/v1/enroll", existingToken, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Self asks the hub who deviceToken is, and the hub's time.
func (c *Client) Self(ctx context.Context, deviceToken string) (*hubapi.DeviceSelf, error) {
	var out hubapi.DeviceSelf
	if err := c.do(ctx, http.MethodGet, "/v1/device", deviceToken, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Unenroll revokes the device that holds deviceToken, on its own behalf
// (`roomrelay unenroll`). Already revoked is success.
func (c *Client) Unenroll(ctx context.Context, deviceToken string) (*hubapi.Device, error) {
	var out hubapi.Device
	if err := c.do(ctx, http.MethodPost, "/v1/unenroll", deviceToken, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Devices lists enrolled devices with their presence.
func (c *Client) Devices(ctx context.Context) ([]hubapi.Device, error) {
	var out hubapi.DeviceList
	if err := c.do(ctx, http.MethodGet, "/v1/devices", c.Token, nil, &out); err != nil {
		return nil, err
	}
	return out.Devices, nil
}

// hubapi.Device returns one device.
func (c *Client) Device(ctx context.Context, id string) (*hubapi.Device, error) {
	var out hubapi.Device
	if err := c.do(ctx, http.MethodGet, "/v1/devices/"+url.PathEscape(id), c.Token, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Revoke revokes a device: its token stops working and its socket is closed.
func (c *Client) Revoke(ctx context.Context, id string) (*hubapi.Device, error) {
	var out hubapi.Device
	if err := c.do(ctx, http.MethodPost, "/v1/devices/"+url.PathEscape(id)+"/revoke", c.Token, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Command sends a command to a device and waits for its result. A result
// that failed on the device or in the hub (device_offline, expired, ...) is
// returned as a *relay.Result with OK false and a nil error, with the HTTP
// status in status; err is non-nil only when no result came back (transport
// failure, bad admin token: then an *APIError).
func (c *Client) Command(ctx context.Context, deviceID string, req hubapi.CommandRequest) (res *relay.Result, status int, err error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, 0, fmt.Errorf("encode command: %w", err)
	}
	resp, err := c.send(ctx, http.MethodPost, "/v1/devices/"+url.PathEscape(deviceID)+"/commands", c.Token, body)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("read command result: %w", err)
	}
	var r relay.Result
	if err := json.Unmarshal(data, &r); err != nil || (r.ID == "" && r.Error == nil) {
		return nil, resp.StatusCode, apiError(resp.StatusCode, data)
	}
	return &r, resp.StatusCode, nil
}

func (c *Client) do(ctx context.Context, method, path, token string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	resp, err := c.send(ctx, method, path, token, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("read %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return apiError(resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode %s %s: %w", method, path, err)
		}
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path, token string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return nil, fmt.Errorf("build %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp, nil
}

func apiError(status int, data []byte) error {
	var eb hubapi.ErrorBody
	if err := json.Unmarshal(data, &eb); err != nil || eb.Error.Code == "" {
		msg := strings.TrimSpace(string(data))
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return &APIError{Status: status, Code: "http_" + fmt.Sprint(status), Message: msg}
	}
	return &APIError{Status: status, Code: eb.Error.Code, Message: eb.Error.Message}
}

// IsCode reports whether err is an *APIError with the given code.
func IsCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}

// WaitProposal returns the owner's decision on a proposal, waiting up to wait
// (at most 60 s) on the hub for it: one long-poll request, answered as soon
// as the device reports the decision. When the wait ends first the state is
// pending; wait 0 reads the current state. A proposal the hub never routed
// for that device is an *APIError with code not_found.
func (c *Client) WaitProposal(ctx context.Context, deviceID, proposalID string, wait time.Duration) (*hubapi.ProposalState, error) {
	path := "/v1/devices/" + url.PathEscape(deviceID) + "/proposals/" + url.PathEscape(proposalID)
	if wait > 0 {
		path += "?wait=" + url.QueryEscape(wait.String())
	}
	var out hubapi.ProposalState
	if err := c.do(ctx, http.MethodGet, path, c.Token, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateClientToken issues a client (MCP) token for project with scope
// hubapi.ScopeRead or hubapi.ScopeWrite. Its Token field is the secret,
// shown this once.
func (c *Client) CreateClientToken(ctx context.Context, project, scope, name string) (*hubapi.ClientToken, error) {
	var out hubapi.ClientToken
	req := hubapi.ClientTokenRequest{Project: project, Scope: scope, Name: name}
	if err := c.do(ctx, http.MethodPost, "/v1/client-tokens", c.Token, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ClientTokens lists client tokens (never their secrets).
func (c *Client) ClientTokens(ctx context.Context) ([]hubapi.ClientToken, error) {
	var out hubapi.ClientTokenList
	if err := c.do(ctx, http.MethodGet, "/v1/client-tokens", c.Token, nil, &out); err != nil {
		return nil, err
	}
	return out.Tokens, nil
}

// RevokeClientToken revokes a client token on every hub node.
func (c *Client) RevokeClientToken(ctx context.Context, id string) (*hubapi.ClientToken, error) {
	var out hubapi.ClientToken
	if err := c.do(ctx, http.MethodPost, "/v1/client-tokens/"+url.PathEscape(id)+"/revoke", c.Token, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Bearer is an http.RoundTripper that sends a bearer token with every
// request, for clients of the hub that bring their own HTTP stack (an MCP
// client with a client token). Base nil means http.DefaultTransport.
type Bearer struct {
	Token string
	Base  http.RoundTripper
}

func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.Token)
	base := b.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// Explain returns a transport failure of a call to the hub with what to do
// about it (a certificate the machine does not trust, a plain-HTTP hub
// called over HTTPS, a hub that does not answer); any other error, an
// *APIError included, comes back unchanged.
func Explain(err error) error {
	if ex := explainTransport(err); ex != nil {
		return ex
	}
	return err
}

// Unreachable reports whether err is a transport failure (the hub was not
// reached or its certificate refused), not an answer from the hub.
func Unreachable(err error) bool { return explainTransport(err) != nil }

// explainTransport is a transport failure explained, or nil when err is
// none (nil, an answer from the hub, anything else).
func explainTransport(err error) error {
	var ae *APIError
	if err == nil || errors.As(err, &ae) {
		return nil
	}
	if ex := tlsfiles.Explain(err); ex != nil {
		return fmt.Errorf("cannot connect to the hub: %w", ex)
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return fmt.Errorf("%w (the hub serves plain HTTP: use an http:// --hub, or start it with --tls-cert and --tls-key)", err)
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) {
		return fmt.Errorf("cannot reach the hub: %w (is `roomrelay hub` running, and is --hub right?)", err)
	}
	return nil
}
