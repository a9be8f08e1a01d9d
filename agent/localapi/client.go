package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// DefaultTimeout bounds one request of Client.Do: longer than the longest
// the agent takes to answer (an approval's check, review.DefaultCheckTimeout),
// so a hung agent fails the call instead of hanging the caller.
const DefaultTimeout = 60 * time.Second

// Client calls a running agent's local API (the CLI, tests, a Go app).
type Client struct {
	// Name goes in the Roomrelay-Client header ("roomrelay-cli/1.2").
	Name string
	// Timeout bounds each Do, from dialing to the last byte of the answer:
	// 0 is DefaultTimeout, negative is none (ctx alone). Stream is not
	// bounded by it: an event stream is meant to stay open.
	Timeout time.Duration
	ep      Endpoint
	hc      *http.Client
}

// ErrNotRunning: no agent answers at the endpoint the discovery file names
// (or there is no discovery file).
var ErrNotRunning = errors.New("local api: the agent is not running")

// NewClient returns a client of the endpoint.
func NewClient(ep Endpoint) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dialEndpoint(ctx, ep) },
		// One connection is plenty for a CLI; an app keeps it alive.
		MaxIdleConns:    2,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{ep: ep, hc: &http.Client{Transport: tr}}
}

// Discover reads the discovery file in configDir and checks that the agent
// answers there; ErrNotRunning (wrapped) when it does not, ErrNotOwned
// (wrapped) when the file, the socket or the process answering on it is
// another user's: the client never speaks to those.
func Discover(ctx context.Context, configDir string) (*Client, Discovery, error) {
	d, err := ReadDiscovery(configDir)
	if errors.Is(err, ErrNotOwned) {
		return nil, d, err
	}
	if err != nil {
		return nil, d, fmt.Errorf("%w: %w", ErrNotRunning, err)
	}
	c := NewClient(Endpoint{Transport: d.Transport, Path: d.Path})
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := dialEndpoint(ctx, c.ep)
	if errors.Is(err, ErrNotOwned) {
		return nil, d, err
	}
	if err != nil {
		return nil, d, fmt.Errorf("%w: %w", ErrNotRunning, err)
	}
	conn.Close()
	return c, d, nil
}

// Endpoint is where the client connects.
func (c *Client) Endpoint() Endpoint { return c.ep }

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Do sends a request to path (below /localapi/v1/, e.g. "status") with body
// as JSON (nil: none) and decodes a 2xx answer into out (nil: discarded).
// An error answer is returned as *APIError. hdr adds headers (If-Match).
// The call ends at ctx's deadline or after Timeout, whichever is first; the
// error then wraps context.DeadlineExceeded.
func (c *Client) Do(ctx context.Context, method, path string, body, out any, hdr http.Header) (http.Header, error) {
	if t := c.timeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+Host+Prefix+strings.TrimPrefix(path, "/"), rd)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Name != "" {
		req.Header.Set(HeaderClient, c.Name)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("local api: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.Header, fmt.Errorf("local api: %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error *APIError `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == nil {
			return resp.Header, fmt.Errorf("local api: %s %s: %s", method, path, resp.Status)
		}
		e.Error.Status = resp.StatusCode
		return resp.Header, e.Error
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.Header, fmt.Errorf("local api: %s %s: decode: %w", method, path, err)
		}
	}
	return resp.Header, nil
}

func (c *Client) timeout() time.Duration {
	if c.Timeout == 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

// Stream opens GET path (events) and returns the response for the caller
// to read line by line and close.
func (c *Client) Stream(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+Host+Prefix+strings.TrimPrefix(path, "/"), nil)
	if err != nil {
		return nil, err
	}
	if c.Name != "" {
		req.Header.Set(HeaderClient, c.Name)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("local api: GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("local api: GET %s: %s", path, resp.Status)
	}
	return resp, nil
}
