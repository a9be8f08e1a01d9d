package hub

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// Client tokens: bearer tokens for cloud clients (the MCP front), one
// project and one scope each. rr_clients holds "id.<id>" → the record and
// "h.<sha256>" → the id; revoking deletes the hash key and marks the record
// revoked, so every node stops accepting the token at its next request (a
// node with other nodes beside it caches only which record a hash names,
// never the record; a hub on its embedded NATS server, the only writer of
// its buckets, also keeps the records it verified: clientCache).

type clientTokenRec struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Project   string    `json:"project"`
	Scope     string    `json:"scope"`
	CreatedAt time.Time `json:"created_at"`
	LastUsed  time.Time `json:"last_used,omitzero"`
	Revoked   bool      `json:"revoked,omitempty"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	Hash      string    `json:"hash"`
}

func (r *clientTokenRec) view() hubapi.ClientToken {
	return hubapi.ClientToken{ID: r.ID, Name: r.Name, Project: r.Project, Scope: r.Scope, CreatedAt: r.CreatedAt,
		LastUsed: r.LastUsed, Revoked: r.Revoked, RevokedAt: r.RevokedAt}
}

// Client is who a verified client token speaks for.
type Client struct {
	TokenID string
	Name    string
	Project string
	Scope   string // hubapi.ScopeRead or hubapi.ScopeWrite
	// OAuth is set for an OAuth access token (relay/hub/oauth): TokenID is
	// then its grant's id.
	OAuth bool
	// Device, when set, binds the client to one device: rooms on any other
	// device of the project are not found (a grant approved on a device).
	Device string
}

// CanWrite reports whether the token may call tools that change a device.
func (c *Client) CanWrite() bool { return c.Scope == hubapi.ScopeWrite }

// ErrBadClientToken is a client token the hub does not know, or revoked.
var ErrBadClientToken = errors.New("the token is not a valid roomrelay client token (unknown or revoked); create one with `roomrelay hub token create`")

var tokenNameOK = func(s string) bool {
	return len(s) <= 100 && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// CreateClientToken issues a token for project with scope read or write and
// returns it once, with its secret.
func (h *Hub) CreateClientToken(ctx context.Context, project, scope, name string) (*hubapi.ClientToken, error) {
	if !relay.ValidID(project) {
		return nil, errInvalid("project must be %s", relay.IDRule)
	}
	if scope != hubapi.ScopeRead && scope != hubapi.ScopeWrite {
		return nil, errInvalid("scope must be %q or %q (write implies read)", hubapi.ScopeRead, hubapi.ScopeWrite)
	}
	if !tokenNameOK(name) {
		return nil, errInvalid("name is at most 100 bytes without control characters")
	}
	id := newID("tok-")
	if name == "" {
		name = id
	}
	secret := newSecret("rrc_")
	rec := clientTokenRec{ID: id, Name: name, Project: project, Scope: scope, CreatedAt: h.cfg.Now().UTC(), Hash: hashSecret("client", secret)}
	if _, err := h.st.clients.Create(ctx, "id."+id, mustJSON(rec)); err != nil {
		return nil, unavailable("store the token", err)
	}
	if _, err := h.st.clients.Create(ctx, "h."+rec.Hash, []byte(id)); err != nil {
		_ = h.st.clients.Purge(context.WithoutCancel(ctx), "id."+id)
		return nil, unavailable("store the token", err)
	}
	h.log.Info("client token created", "token_id", id, "project", project, "scope", scope)
	out := rec.view()
	out.Token = secret
	return &out, nil
}

// ClientTokens lists every client token, revoked ones included, oldest
// first. Never the secrets.
func (h *Hub) ClientTokens(ctx context.Context) ([]hubapi.ClientToken, error) {
	lister, err := h.st.clients.ListKeysFiltered(ctx, "id.*")
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, unavailable("list tokens", err)
	}
	out := []hubapi.ClientToken{}
	if lister == nil {
		return out, nil
	}
	defer lister.Stop()
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		rec, _, err := getJSON[clientTokenRec](ctx, h.st.clients, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, unavailable("read tokens", err)
		}
		out = append(out, rec.view())
	}
	slices.SortFunc(out, func(a, b hubapi.ClientToken) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

var errNoClientToken = &Error{Code: hubapi.CodeNotFound, Message: "no such client token"}

// RevokeClientToken revokes a token at once on every node (idempotent).
func (h *Hub) RevokeClientToken(ctx context.Context, id string) (*hubapi.ClientToken, error) {
	// After the writes, done or not: a verify that read the record before
	// them puts nothing back (clientCache).
	defer h.clientRec.drop(id)
	if !kvKeyRe.MatchString(id) {
		return nil, errNoClientToken
	}
	for range 16 {
		rec, rev, err := getJSON[clientTokenRec](ctx, h.st.clients, "id."+id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, errNoClientToken
		}
		if err != nil {
			return nil, unavailable("read the token", err)
		}
		// The hash key goes first: from here on no node accepts the token.
		if err := h.st.clients.Purge(ctx, "h."+rec.Hash); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, unavailable("revoke the token", err)
		}
		if !rec.Revoked {
			rec.Revoked, rec.RevokedAt = true, h.cfg.Now().UTC()
			if _, err := h.st.clients.Update(ctx, "id."+id, mustJSON(rec), rev); err != nil {
				if isRevMismatch(err) {
					continue
				}
				return nil, unavailable("revoke the token", err)
			}
			h.log.Info("client token revoked", "token_id", id)
		}
		v := rec.view()
		return &v, nil
	}
	return nil, unavailable("revoke the token", errors.New("too much contention"))
}

// VerifyClientToken returns who a bearer token speaks for, or
// ErrBadClientToken. Every call reads the token's record from the stream
// leader, so a revocation holds on every node from the next request on.
// Which record a token names is cached (clientIDs): a token's hash key
// never changes and never moves to another record, and what a revocation
// changes is the record itself (revoked, or gone), which is always read.
func (h *Hub) VerifyClientToken(ctx context.Context, secret string) (*Client, error) {
	if !strings.HasPrefix(secret, "rrc_") || len(secret) > 200 {
		return nil, ErrBadClientToken
	}
	key := secretSum("client", secret)
	id, ok := h.clientIDs.get(key)
	embedded := h.cfg.NATSURL == ""
	if ok && embedded {
		if c, hit := h.clientRec.get(id); hit {
			return &c, nil
		}
	}
	gen := h.clientRec.generation()
	if !ok {
		e, err := h.st.clients.Get(ctx, "h."+hex.EncodeToString(key[:]))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, ErrBadClientToken
		}
		if err != nil {
			return nil, unavailable("check the token", err)
		}
		id = string(e.Value())
	}
	// The record from the stream leader: a replica that has not applied a
	// revoke yet would otherwise let the token through (the hash key never
	// changes, so its read may come from any replica).
	rec, _, err := getJSON[clientTokenRec](ctx, latest(h.st.clients), "id."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, ErrBadClientToken
	}
	if err != nil {
		return nil, unavailable("check the token", err)
	}
	if rec.Revoked {
		return nil, ErrBadClientToken
	}
	if !ok {
		h.clientIDs.put(key, id)
	}
	c := Client{TokenID: rec.ID, Name: rec.Name, Project: rec.Project, Scope: rec.Scope}
	if embedded {
		h.clientRec.put(gen, id, c)
	}
	return &c, nil
}

// clientCache keeps, on a hub with the embedded NATS server, who each
// client token it verified speaks for, so the MCP front's every request
// does not read the record again (a NATS round trip: ~0.1 ms of a
// read_room's ~0.5 ms through MCP). It is exact there and nowhere else:
// the embedded server does not listen (hub.go's startEmbedded), so every
// write to rr_clients is this process's own, and the only one that changes
// what a record says for a verify, RevokeClientToken, drops the record
// here before it returns. Beside other nodes (NATSURL) the record is read
// from the stream leader on every request, as the revoke may come from
// any node.
//
// A verify that read the record before a revoke's write must not put it
// back after the revoke dropped it: put takes the generation the verify
// saw before its read and gives up when a drop came in between.
type clientCache struct {
	mu  sync.Mutex
	gen uint64
	m   map[string]Client // token id → who it speaks for
	// afterRead, when set (tests), runs between a verify's read of the
	// record and its put.
	afterRead func()
}

func (c *clientCache) get(id string) (Client, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl, ok := c.m[id]
	return cl, ok
}

// generation is the count of drops so far, for put.
func (c *clientCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put keeps cl unless a drop came since generation returned gen.
func (c *clientCache) put(gen uint64, id string, cl Client) {
	if c.afterRead != nil {
		c.afterRead()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.m == nil || len(c.m) >= maxTokenCache {
		c.m = make(map[string]Client)
	}
	c.m[id] = cl
}

// drop forgets id's record, and makes every verify that read it before
// give up its put.
func (c *clientCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.m, id)
}

// lastUsedEvery bounds how often one node rewrites a token's last_used.
const lastUsedEvery = time.Minute

// tokenUse remembers when this node last wrote each token's last_used.
type tokenUse struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// NoteClientUse records that a token was used now, writing at most once a
// minute per token and node (last_used is a hint, not an audit trail).
func (h *Hub) NoteClientUse(ctx context.Context, tokenID string) {
	now := h.cfg.Now().UTC()
	h.uses.mu.Lock()
	if h.uses.last == nil {
		h.uses.last = map[string]time.Time{}
	}
	if now.Sub(h.uses.last[tokenID]) < lastUsedEvery {
		h.uses.mu.Unlock()
		return
	}
	if len(h.uses.last) > maxTracked {
		clear(h.uses.last)
	}
	h.uses.last[tokenID] = now
	h.uses.mu.Unlock()
	for range 4 {
		rec, rev, err := getJSON[clientTokenRec](ctx, h.st.clients, "id."+tokenID)
		if err != nil {
			return
		}
		rec.LastUsed = now
		if _, err := h.st.clients.Update(ctx, "id."+tokenID, mustJSON(rec), rev); err == nil || !isRevMismatch(err) {
			if err != nil {
				h.log.Warn("record token use", "token_id", tokenID, "err", fmt.Sprint(err))
			}
			return
		}
	}
}

func (h *Hub) handleTokenCreate(w http.ResponseWriter, r *http.Request) error {
	var req hubapi.ClientTokenRequest
	if err := decodeBody(w, r, maxSmallBody, &req); err != nil {
		return err
	}
	t, err := h.CreateClientToken(r.Context(), req.Project, req.Scope, req.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

func (h *Hub) handleTokenList(w http.ResponseWriter, r *http.Request) error {
	ts, err := h.ClientTokens(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hubapi.ClientTokenList{Tokens: ts})
	return nil
}

func (h *Hub) handleTokenRevoke(w http.ResponseWriter, r *http.Request) error {
	t, err := h.RevokeClientToken(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}
