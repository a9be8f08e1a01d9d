package hub

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// requestSlack is added to a command's deadline for the NATS request, so an
// agent's own "expired" answer (sent at the deadline) still gets through.
const requestSlack = 500 * time.Millisecond

const maxSmallBody = 64 << 10

func (h *Hub) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+relay.ConnectPath, h.handleConnect)
	mux.HandleFunc("POST /v1/enroll", h.handleEnroll)
	mux.HandleFunc("POST /v1/pairing-codes", h.admin(h.handlePair))
	mux.HandleFunc("GET /v1/devices", h.admin(h.handleDevices))
	mux.HandleFunc("GET /v1/devices/{id}", h.admin(h.handleDevice))
	mux.HandleFunc("POST /v1/devices/{id}/revoke", h.admin(h.handleRevoke))
	mux.HandleFunc("POST /v1/devices/{id}/commands", h.admin(h.handleCommand))
	mux.HandleFunc("GET /v1/devices/{id}/proposals/{pid}", h.admin(h.handleProposal))
	mux.HandleFunc("GET /v1/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "node": h.cfg.NodeName})
	})
	// Every handler is counted, so Run returns only after the last one.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.reqWG.Add(1)
		defer h.reqWG.Done()
		mux.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, hubapi.ErrorBody{Error: hubapi.ErrorDetail{Code: code, Message: msg}})
}

func bearer(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// admin guards a handler with the admin token (constant-time compare of
// digests, so neither content nor length leaks through timing).
func (h *Hub) admin(next http.HandlerFunc) http.HandlerFunc {
	want := sha256.Sum256([]byte(h.cfg.AdminToken))
	return func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r)
		got := sha256.Sum256([]byte(tok))
		if tok == "" || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="roomrelay-admin"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "this endpoint needs the hub's admin token as a bearer token")
			return
		}
		next(w, r)
	}
}

func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("request body exceeds %d bytes", limit))
			return false
		}
		writeError(w, http.StatusBadRequest, "invalid_request", "request body is not the expected JSON: "+err.Error())
		return false
	}
	return true
}

// Device authentication failures.
var (
	errNoToken      = errors.New("no bearer token")
	errBadToken     = errors.New("the token is not valid for this hub")
	errRevokedToken = errors.New("the device was revoked; enroll it again")
)

func (h *Hub) authDevice(ctx context.Context, r *http.Request) (*deviceRec, error) {
	tok := bearer(r)
	if tok == "" {
		return nil, errNoToken
	}
	tr, _, err := getJSON[tokenRec](ctx, h.st.tokens, hashSecret("token", tok))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errBadToken
	}
	if err != nil {
		return nil, fmt.Errorf("look up token: %w", err)
	}
	d, _, err := getJSON[deviceRec](ctx, h.st.devices, tr.DeviceID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errBadToken
	}
	if err != nil {
		return nil, fmt.Errorf("look up device: %w", err)
	}
	if d.Revoked {
		return nil, errRevokedToken
	}
	return d, nil
}

// writeAuthError answers a failed device authentication per RFC 6750.
func (h *Hub) writeAuthError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errNoToken):
		w.Header().Set("WWW-Authenticate", `Bearer realm="roomrelay"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "send the device token as Authorization: Bearer <token>; enroll with `roomrelay enroll` to get one")
	case errors.Is(err, errBadToken), errors.Is(err, errRevokedToken):
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="roomrelay", error="invalid_token", error_description=%q`, err.Error()))
		code := "invalid_token"
		if errors.Is(err, errRevokedToken) {
			code = "revoked"
		}
		writeError(w, http.StatusUnauthorized, code, err.Error()+"; run `roomrelay enroll` with a new pairing code")
	default:
		h.log.Error("device auth", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not check the token; retry")
	}
}

func (h *Hub) handlePair(w http.ResponseWriter, r *http.Request) {
	var req hubapi.PairingRequest
	if !decodeBody(w, r, maxSmallBody, &req) {
		return
	}
	if !projectRe.MatchString(req.Project) {
		writeError(w, http.StatusBadRequest, "invalid_request", "project must be 1–128 characters of letters, digits, '.', '_', ':', '-'")
		return
	}
	ttl := h.cfg.PairingTTL
	if req.TTLSeconds < 0 || time.Duration(req.TTLSeconds)*time.Second > MaxPairingTTL {
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("ttl_seconds must be between 1 and %d", int(MaxPairingTTL/time.Second)))
		return
	}
	if req.TTLSeconds > 0 {
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	now := h.cfg.Now().UTC()
	rec := pairingRec{Project: req.Project, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	for range 5 {
		code := newPairingCode()
		_, err := h.st.pairing.Create(r.Context(), hashSecret("pairing", code), mustJSON(rec))
		if isRevMismatch(err) {
			continue // hash collision with a live code: draw again
		}
		if err != nil {
			h.log.Error("store pairing code", "err", err)
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not store the pairing code; retry")
			return
		}
		h.log.Info("pairing code issued", "project", req.Project, "expires_at", rec.ExpiresAt)
		writeJSON(w, http.StatusCreated, hubapi.PairingCode{Code: code, Project: req.Project, ExpiresAt: rec.ExpiresAt})
		return
	}
	writeError(w, http.StatusServiceUnavailable, "unavailable", "could not draw a free pairing code; retry")
}

func (h *Hub) handleEnroll(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	addr := clientAddr(r)
	if blocked, retry := h.enrollLim.blocked(addr); blocked {
		w.Header().Set("Retry-After", strconv.Itoa(int(retry.Seconds())+1))
		writeError(w, http.StatusTooManyRequests, "rate_limited",
			fmt.Sprintf("too many failed enrollments from %s; retry in %s with a valid code from `roomrelay hub pair`", addr, retry.Round(time.Second)))
		return
	}
	// refuse answers a bad code and counts it against the address.
	refuse := func(status int, code, msg string) {
		h.enrollLim.fail(addr)
		writeError(w, status, code, msg)
	}
	var req hubapi.EnrollRequest
	if !decodeBody(w, r, maxSmallBody, &req) {
		return
	}
	code, ok := normalizeCode(req.Code)
	if !ok {
		refuse(http.StatusBadRequest, "invalid_request", "a pairing code is 8 characters like ABCD-1234")
		return
	}
	if len(req.DeviceName) > 100 || len(req.OS) > 32 {
		writeError(w, http.StatusBadRequest, "invalid_request", "device_name is at most 100 bytes and os at most 32")
		return
	}
	// An existing device adds a project with its own token; check it before
	// spending the code.
	var existing *deviceRec
	if bearer(r) != "" {
		d, err := h.authDevice(ctx, r)
		if err != nil {
			h.writeAuthError(w, err)
			return
		}
		existing = d
	}

	key := hashSecret("pairing", code)
	pr, rev, err := getJSON[pairingRec](ctx, h.st.pairing, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		refuse(http.StatusNotFound, "pairing_code_unknown", "no such pairing code; check it or ask for a new one with `roomrelay hub pair`")
		return
	case err != nil:
		h.log.Error("read pairing code", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not check the code; retry")
		return
	case !pr.UsedAt.IsZero():
		refuse(http.StatusConflict, "pairing_code_used", "this pairing code was already used; ask for a new one with `roomrelay hub pair`")
		return
	case !h.cfg.Now().Before(pr.ExpiresAt):
		refuse(http.StatusGone, "pairing_code_expired", "this pairing code expired; ask for a new one with `roomrelay hub pair`")
		return
	}

	devID := newID("dev-")
	if existing != nil {
		devID = existing.ID
	}
	// Spend the code with compare-and-set: of two concurrent enrollments
	// with one code exactly one gets past this line.
	pr.UsedAt, pr.UsedBy = h.cfg.Now().UTC(), devID
	if _, err := h.st.pairing.Update(ctx, key, mustJSON(pr), rev); err != nil {
		if isRevMismatch(err) {
			writeError(w, http.StatusConflict, "pairing_code_used", "this pairing code was already used; ask for a new one with `roomrelay hub pair`")
			return
		}
		h.log.Error("spend pairing code", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not record the enrollment; retry")
		return
	}

	var out hubapi.Enrollment
	if existing != nil {
		d, err := h.st.updateDevice(ctx, devID, func(d *deviceRec) error {
			if d.Revoked {
				return errRevokedToken
			}
			if !d.hasProject(pr.Project) {
				d.Projects = append(d.Projects, pr.Project)
			}
			return nil
		})
		if err != nil {
			h.log.Error("add project to device", "device", devID, "err", err)
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not record the enrollment; retry with a new code")
			return
		}
		out = hubapi.Enrollment{DeviceID: d.ID, Token: bearer(r), Project: pr.Project, Projects: d.Projects}
	} else {
		token := newSecret("rrd_")
		th := hashSecret("token", token)
		now := h.cfg.Now().UTC()
		name := req.DeviceName
		if name == "" {
			name = devID
		}
		d := deviceRec{ID: devID, Name: name, OS: req.OS, Projects: []string{pr.Project}, CreatedAt: now, TokenHash: th}
		if _, err := h.st.devices.Create(ctx, devID, mustJSON(d)); err != nil {
			h.log.Error("create device", "err", err)
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not record the enrollment; retry with a new code")
			return
		}
		if _, err := h.st.tokens.Create(ctx, th, mustJSON(tokenRec{DeviceID: devID, CreatedAt: now})); err != nil {
			h.log.Error("store token hash", "err", err)
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not record the enrollment; retry with a new code")
			return
		}
		out = hubapi.Enrollment{DeviceID: devID, Token: token, Project: pr.Project, Projects: d.Projects}
	}
	h.log.Info("device enrolled", "device", out.DeviceID, "project", pr.Project, "added", existing != nil)
	writeJSON(w, http.StatusOK, out)
}

func (h *Hub) deviceID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !deviceIDRe.MatchString(id) {
		writeError(w, http.StatusNotFound, "not_found", "no such device")
		return "", false
	}
	return id, true
}

func (h *Hub) handleDevices(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	lister, err := h.st.devices.ListKeys(ctx)
	if err != nil {
		h.log.Error("list devices", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not list devices; retry")
		return
	}
	defer lister.Stop()
	var ids []string
	for k := range lister.Keys() {
		ids = append(ids, k)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := hubapi.DeviceList{Devices: []hubapi.Device{}}
	for _, id := range ids {
		d, err := h.device(ctx, id)
		if err != nil {
			continue // deleted between list and get
		}
		out.Devices = append(out.Devices, *d)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Hub) handleDevice(w http.ResponseWriter, r *http.Request) {
	id, ok := h.deviceID(w, r)
	if !ok {
		return
	}
	d, err := h.device(r.Context(), id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		writeError(w, http.StatusNotFound, "not_found", "no such device")
		return
	}
	if err != nil {
		h.log.Error("get device", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not read the device; retry")
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// device assembles the API view of a device with its effective presence.
func (h *Hub) device(ctx context.Context, id string) (*hubapi.Device, error) {
	d, _, err := getJSON[deviceRec](ctx, h.st.devices, id)
	if err != nil {
		return nil, err
	}
	out := &hubapi.Device{ID: d.ID, Name: d.Name, OS: d.OS, Projects: d.Projects, CreatedAt: d.CreatedAt,
		Revoked: d.Revoked, RevokedAt: d.RevokedAt, AgentVersion: d.AgentVersion, Policy: d.Policy, LastSeen: d.LastSeen}
	if out.Policy == nil {
		out.Policy = []relay.ProjectPolicy{}
	}
	out.Presence = hubapi.Presence{State: hubapi.StateOffline, LastSeen: d.LastSeen}
	p, _, err := getJSON[presenceRec](ctx, h.st.presence, id)
	if err == nil {
		out.Presence = h.effectivePresence(p)
		if out.Presence.LastSeen.After(out.LastSeen) {
			out.LastSeen = out.Presence.LastSeen
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, err
	}
	return out, nil
}

// effectivePresence turns a stored record into what a reader should show: an
// online or sleeping record its node stopped refreshing (the node died) is
// offline, last seen at its last refresh.
func (h *Hub) effectivePresence(p *presenceRec) hubapi.Presence {
	out := hubapi.Presence{State: p.State, Since: p.Since, LastSeen: p.LastSeen, Session: p.Session, Node: p.Node}
	if p.State == hubapi.StateOffline {
		return out
	}
	stale := time.Duration(p.StaleAfterMS) * time.Millisecond
	if stale <= 0 {
		stale = h.staleAfter()
	}
	if h.cfg.Now().Sub(p.Refreshed) > stale {
		out.State, out.Since = hubapi.StateOffline, p.Refreshed
		if p.Refreshed.After(out.LastSeen) {
			out.LastSeen = p.Refreshed
		}
	}
	return out
}

func (h *Hub) handleRevoke(w http.ResponseWriter, r *http.Request) {
	id, ok := h.deviceID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	_, err := h.st.updateDevice(ctx, id, func(d *deviceRec) error {
		if !d.Revoked {
			d.Revoked, d.RevokedAt = true, h.cfg.Now().UTC()
		}
		return nil
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		writeError(w, http.StatusNotFound, "not_found", "no such device")
		return
	}
	if err != nil {
		h.log.Error("revoke device", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not revoke the device; retry")
		return
	}
	// The token hash stays (mapped to a revoked device) so a later use is
	// answered "revoked" rather than "unknown token".
	if err := h.nc.Publish(ctlSubject(id), mustJSON(ctlMsg{Op: "revoke"})); err != nil {
		h.log.Error("publish revoke", "err", err)
	}
	_ = h.nc.Flush()
	h.log.Info("device revoked", "device", id)
	out, err := h.device(ctx, id)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "revoked, but the hub could not read the device back")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// StatusFor maps a command's error code to the HTTP status of
// POST /v1/devices/{id}/commands.
func StatusFor(res *relay.Result) int {
	if res.OK {
		return http.StatusOK
	}
	if res.Error == nil {
		return http.StatusInternalServerError
	}
	switch res.Error.Code {
	case relay.CodeDeviceOffline:
		return http.StatusServiceUnavailable
	case relay.CodeExpired:
		return http.StatusGatewayTimeout
	case relay.CodeNotEnrolled, relay.CodeProjectNotEnabled, relay.CodeCommandNotAllowed:
		return http.StatusForbidden
	case relay.CodeNotFound:
		return http.StatusNotFound
	case relay.CodeInvalidArgs:
		return http.StatusBadRequest
	case relay.CodeIdempotencyConflict, relay.CodePendingReview:
		return http.StatusConflict
	case relay.CodeBusy, relay.CodeRateLimited:
		return http.StatusTooManyRequests
	case relay.CodeSandboxFailed:
		return http.StatusUnprocessableEntity
	default:
		return http.StatusInternalServerError
	}
}

func writeResult(w http.ResponseWriter, res *relay.Result) {
	writeJSON(w, StatusFor(res), res)
}

func (h *Hub) handleCommand(w http.ResponseWriter, r *http.Request) {
	id, ok := h.deviceID(w, r)
	if !ok {
		return
	}
	var req hubapi.CommandRequest
	if !decodeBody(w, r, int64(h.cfg.MaxFrame), &req) {
		return
	}
	if req.ID == "" {
		req.ID = newID("cmd-")
	}
	fail := func(code relay.Code, format string, a ...any) {
		writeResult(w, &relay.Result{ID: req.ID, Error: relay.Errorf(code, format, a...)})
	}
	switch {
	case !commandIDRe.MatchString(req.ID):
		fail(relay.CodeInvalidArgs, "id must be 1–128 characters of letters, digits, '.', '_', ':', '-'")
		return
	case req.Name == "":
		fail(relay.CodeInvalidArgs, "name is required")
		return
	case req.ProjectID == "":
		fail(relay.CodeInvalidArgs, "project_id is required")
		return
	case len(req.Args) > 0 && !isObject(req.Args):
		fail(relay.CodeInvalidArgs, "args must be a JSON object")
		return
	case req.TimeoutMS < 0 || time.Duration(req.TimeoutMS)*time.Millisecond > MaxCommandTimeout:
		fail(relay.CodeInvalidArgs, "timeout_ms must be between 1 and %d", MaxCommandTimeout.Milliseconds())
		return
	}
	timeout := DefaultCommandTimeout
	if req.TimeoutMS > 0 {
		timeout = time.Duration(req.TimeoutMS) * time.Millisecond
	}

	ctx := r.Context()
	d, _, err := getJSON[deviceRec](ctx, h.st.devices, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		fail(relay.CodeNotFound, "no device %s is enrolled on this hub", id)
		return
	case err != nil:
		h.log.Error("read device for command", "err", err)
		fail(relay.CodeInternal, "the hub could not read the device; retry")
		return
	case d.Revoked:
		fail(relay.CodeNotEnrolled, "device %s was revoked; enroll it again", id)
		return
	case !d.hasProject(req.ProjectID):
		fail(relay.CodeNotEnrolled, "device %s is not enrolled for project %s: `roomrelay hub pair --project %s`, then `roomrelay enroll` on the device", id, req.ProjectID, req.ProjectID)
		return
	}

	cmd := relay.Command{ID: req.ID, ProjectID: req.ProjectID, Name: req.Name, Args: req.Args,
		Deadline: h.cfg.Now().Add(timeout).UTC()}
	res := h.route(ctx, id, &cmd, timeout)
	if res.Error == nil && (req.Name == relay.CmdProposeRoomSnippetApp || req.Name == relay.CmdProposeRoomRepoApp) {
		h.noteProposal(ctx, id, res)
	}
	writeResult(w, res)
}

// route sends a command to whichever node holds the device's socket.
func (h *Hub) route(ctx context.Context, dev string, cmd *relay.Command, timeout time.Duration) *relay.Result {
	rctx, cancel := context.WithTimeout(ctx, timeout+requestSlack)
	defer cancel()
	msg, err := h.nc.RequestWithContext(rctx, cmdSubject(dev), mustJSON(cmd))
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return &relay.Result{ID: cmd.ID, Error: relay.Errorf(relay.CodeDeviceOffline, "device %s is not connected to the hub", dev)}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return &relay.Result{ID: cmd.ID, Error: relay.Errorf(relay.CodeExpired, "device %s did not answer within %s", dev, timeout)}
	case errors.Is(err, context.Canceled):
		// The HTTP caller left (or the hub is stopping): tell the device to
		// stop working on a result nobody will read.
		if perr := h.nc.Publish(ctlSubject(dev), mustJSON(ctlMsg{Op: "cancel", Command: cmd.ID})); perr != nil {
			h.log.Warn("publish command cancel", "device", dev, "command", cmd.ID, "err", perr)
		}
		return &relay.Result{ID: cmd.ID, Error: relay.Errorf(relay.CodeInternal, "the request was cancelled (client gone or hub shutting down)")}
	case err != nil:
		h.log.Error("route command", "err", err)
		return &relay.Result{ID: cmd.ID, Error: relay.Errorf(relay.CodeInternal, "the hub could not route the command: %v", err)}
	}
	var res relay.Result
	if err := json.Unmarshal(msg.Data, &res); err != nil {
		return &relay.Result{ID: cmd.ID, Error: relay.Errorf(relay.CodeInternal, "the hub got an unreadable result")}
	}
	if res.ID == "" {
		res.ID = cmd.ID
	}
	return &res
}

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// WaitProposal (for the hub's own endpoints, while Run runs) blocks until the device reports a decision on the proposal
// (a proposal_decided event), or ctx ends. A decision recorded earlier is
// returned at once. Any node can wait: decisions live in a KV bucket.
func (h *Hub) WaitProposal(ctx context.Context, deviceID, proposalID string) (*hubapi.DeviceEvent, error) {
	if !deviceIDRe.MatchString(deviceID) || !kvKeyRe.MatchString(proposalID) {
		return nil, fmt.Errorf("wait proposal: bad device or proposal id")
	}
	select {
	case <-h.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait proposal: hub not running: %w", ctx.Err())
	}
	w, err := h.st.proposals.Watch(ctx, proposalKey(deviceID, proposalID), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("wait proposal: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait proposal: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("wait proposal: watcher closed")
			}
			if e == nil {
				continue // end of the initial values
			}
			var ev hubapi.DeviceEvent
			if err := json.Unmarshal(e.Value(), &ev); err != nil {
				return nil, fmt.Errorf("wait proposal: decode: %w", err)
			}
			return &ev, nil
		}
	}
}
