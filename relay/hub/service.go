package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// This file is the hub's Go API: what the HTTP handlers and the MCP front
// both call. Every method needs Run to be running (Ready closed).

// Error is a refusal the hub's API answers with: an HTTP status, a stable
// code and a sentence saying what to do. Command failures are not Errors:
// they travel as a *relay.Result like the device's own.
type Error struct {
	Status  int // 0: the code's (hubapi.Status)
	Code    string
	Message string
}

func (e *Error) status() int {
	if e.Status != 0 {
		return e.Status
	}
	return hubapi.Status(e.Code)
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errInvalid(format string, a ...any) *Error {
	return &Error{Code: hubapi.CodeInvalidRequest, Message: fmt.Sprintf(format, a...)}
}

var errNoDevice = &Error{Code: hubapi.CodeNotFound, Message: "no such device"}

// unavailableError is a storage or NATS failure the caller may retry. Its
// cause is logged, not shown: callers learn what failed, not the internals.
type unavailableError struct {
	what string
	err  error
}

func (e *unavailableError) Error() string {
	return "the hub could not " + e.what + ": " + e.err.Error()
}
func (e *unavailableError) Unwrap() error { return e.err }

// Public is the sentence a caller sees.
func (e *unavailableError) Public() string { return "the hub could not " + e.what + "; retry" }

func unavailable(what string, err error) error { return &unavailableError{what, err} }

// Pair issues a one-time pairing code for project; ttl 0 is the default.
func (h *Hub) Pair(ctx context.Context, project string, ttl time.Duration) (*hubapi.PairingCode, error) {
	if !relay.ValidID(project) {
		return nil, errInvalid("project must be %s", relay.IDRule)
	}
	if ttl < 0 || ttl > MaxPairingTTL {
		return nil, errInvalid("ttl_seconds must be between 1 and %d", int(MaxPairingTTL/time.Second))
	}
	if ttl == 0 {
		ttl = h.cfg.PairingTTL
	}
	now := h.cfg.Now().UTC()
	rec := pairingRec{Project: project, CreatedAt: now, ExpiresAt: now.Add(ttl)}
	code, err := h.st.createPairingCode(ctx, rec)
	if err != nil {
		return nil, unavailable("store the pairing code", err)
	}
	h.log.Info("pairing code issued", "project", project, "expires_at", rec.ExpiresAt)
	return &hubapi.PairingCode{Code: code, Project: project, ExpiresAt: rec.ExpiresAt}, nil
}

// Enroll spends a pairing code: a new device and token, or, with the token
// of an enrolled device, one more project for it. addr is the caller's
// address for the failed-enrollment limit.
func (h *Hub) Enroll(ctx context.Context, req hubapi.EnrollRequest, deviceToken, addr string) (enr *hubapi.Enrollment, err error) {
	defer func() { h.metrics.enrollDone(deviceToken != "", err) }()
	// Every attempt is counted before it is evaluated and refunded once it
	// succeeded, so concurrent guesses cannot all pass the check first.
	ok, retry := h.enrollLim.take(addr)
	if ok {
		// Failures recorded in KV count too: across hub nodes and restarts.
		if blocked, left := h.storedEnrollBlock(ctx, addr); blocked {
			h.enrollLim.refund(addr)
			ok, retry = false, left
		}
	}
	if !ok {
		return nil, &Error{Code: hubapi.CodeRateLimited,
			Message: fmt.Sprintf("too many failed enrollments from %s; retry in %s with a valid code from `roomrelay hub pair`", addr, retry.Round(time.Second))}
	}
	refunded := false
	refund := func() {
		if !refunded {
			refunded = true
			h.enrollLim.refund(addr)
		}
	}
	code, ok := normalizeCode(req.Code)
	if !ok {
		h.recordEnrollFailure(ctx, addr)
		return nil, errInvalid("a pairing code is 8 characters like ABCD-1234")
	}
	if len(req.DeviceName) > 100 || len(req.OS) > 32 {
		refund() // not a guess
		return nil, errInvalid("device_name is at most 100 bytes and os at most 32")
	}
	// An existing device adds a project with its own token; check it before
	// spending the code.
	var existing *deviceRec
	if deviceToken != "" {
		d, err := h.st.deviceForToken(ctx, deviceToken)
		if err != nil {
			refund() // a bad device token is refused on its own
			return nil, err
		}
		existing = d
	}
	devID := newID("dev-")
	if existing != nil {
		devID = existing.ID
	}
	pr, err := h.st.spendPairingCode(ctx, code, devID, h.cfg.Now())
	if err != nil {
		if errors.Is(err, errCodeUnknown) || errors.Is(err, errCodeUsed) || errors.Is(err, errCodeExpired) {
			h.recordEnrollFailure(ctx, addr)
			return nil, err // the attempt stays counted
		}
		refund()
		return nil, unavailable("check the code", err)
	}
	refund()

	var out hubapi.Enrollment
	if existing != nil {
		d, err := h.st.addProject(ctx, devID, pr.Project)
		if err != nil {
			return nil, h.enrollFailed(ctx, code, devID, err)
		}
		// Every node's device cache learns of the new project.
		h.devs.forget(devID)
		if err := h.nc.Publish(ctlSubject(devID), mustJSON(ctlMsg{Op: opChanged})); err != nil {
			h.log.Warn("publish a device change; other nodes see it within the device cache's TTL", "device", devID, "err", err)
		}
		out = hubapi.Enrollment{DeviceID: d.ID, Token: deviceToken, Project: pr.Project, Projects: d.Projects}
	} else {
		token := newSecret("rrd_")
		name := relay.CleanLine(req.DeviceName, 100)
		if name == "" {
			name = devID
		}
		d := deviceRec{ID: devID, Name: name, OS: relay.CleanLine(req.OS, maxOS), Projects: []string{pr.Project}, CreatedAt: h.cfg.Now().UTC()}
		if err := h.st.createDevice(ctx, d, token); err != nil {
			return nil, h.enrollFailed(ctx, code, devID, err)
		}
		out = hubapi.Enrollment{DeviceID: devID, Token: token, Project: pr.Project, Projects: d.Projects}
	}
	h.log.Info("device enrolled", "device", out.DeviceID, "project", pr.Project, "added", existing != nil)
	return &out, nil
}

// enrollFailed rolls back a spent code after the device could not be
// stored: the same code works on a retry, no device is left behind.
func (h *Hub) enrollFailed(ctx context.Context, code, devID string, err error) error {
	uerr := h.st.unspendPairingCode(context.WithoutCancel(ctx), code, devID)
	if errors.Is(err, errRevokedToken) {
		return err // revoked meanwhile: the code is back for another device
	}
	if uerr != nil {
		h.log.Error("enrollment failed and its pairing code could not be given back", "err", err, "rollback_err", uerr)
		return unavailable("record the enrollment; retry with a new code", err)
	}
	h.log.Warn("enrollment failed; its pairing code stays valid", "err", err)
	return unavailable("record the enrollment; retry with the same code", err)
}

// Device returns one device with its effective presence, or a not_found
// *Error.
func (h *Hub) Device(ctx context.Context, id string) (*hubapi.Device, error) {
	if !deviceIDRe.MatchString(id) {
		return nil, errNoDevice
	}
	d, _, err := getJSON[deviceRec](ctx, h.st.devices, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errNoDevice
	}
	if err != nil {
		return nil, unavailable("read the device", err)
	}
	out := &hubapi.Device{ID: d.ID, Name: d.Name, OS: d.OS, Projects: d.Projects, CreatedAt: d.CreatedAt,
		Revoked: d.Revoked, RevokedAt: d.RevokedAt, AgentVersion: d.AgentVersion, Policy: d.Policy, LastSeen: d.LastSeen}
	if out.Policy == nil {
		out.Policy = []relay.ProjectPolicy{}
	}
	out.Presence, err = h.Presence(ctx, id)
	if err != nil {
		return nil, err
	}
	if out.Presence.State == hubapi.StateOffline && out.Presence.LastSeen.IsZero() {
		out.Presence.LastSeen = d.LastSeen
	}
	if out.Presence.LastSeen.After(out.LastSeen) {
		out.LastSeen = out.Presence.LastSeen
	}
	return out, nil
}

// Devices lists the enrolled devices, all of them or those enrolled for
// project. A device deleted while listing is left out; a bucket that cannot
// be read is an error, never a short list.
func (h *Hub) Devices(ctx context.Context, project string) ([]hubapi.Device, error) {
	ids, err := h.st.deviceIDs(ctx)
	if err != nil {
		return nil, unavailable("list devices", err)
	}
	out := []hubapi.Device{}
	for _, id := range ids {
		d, err := h.Device(ctx, id)
		if errors.Is(err, errNoDevice) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if project == "" || slices.Contains(d.Projects, project) {
			out = append(out, *d)
		}
	}
	return out, nil
}

// Presence is a device's connection state as a reader should show it: an
// online or sleeping record its node stopped refreshing (the node died) is
// offline, last seen at its last refresh. A device never seen is offline.
func (h *Hub) Presence(ctx context.Context, id string) (hubapi.Presence, error) {
	p, _, err := getJSON[presenceRec](ctx, h.st.presence, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return hubapi.Presence{State: hubapi.StateOffline}, nil
	}
	if err != nil {
		return hubapi.Presence{}, unavailable("read presence", err)
	}
	return h.effectivePresence(p), nil
}

func (h *Hub) effectivePresence(p *presenceRec) hubapi.Presence {
	out := hubapi.Presence{State: p.State, Since: p.Since, LastSeen: p.LastSeen, Session: p.Session, Node: p.Node, App: p.App}
	if p.State == hubapi.StateOffline {
		out.App = "" // the app's presence means something only while the device is reachable
		return out
	}
	// offline is an online record its writer can no longer stand behind:
	// offline since, last seen at the latest of its last frame and seen.
	offline := func(since time.Time, seen ...time.Time) hubapi.Presence {
		out.State, out.Since, out.App = hubapi.StateOffline, since, ""
		for _, t := range seen {
			if t.After(out.LastSeen) {
				out.LastSeen = t
			}
		}
		return out
	}
	if h.nodes.otherRun(p.Node, p.NodeStarted) {
		// Written by an earlier run of a node that was restarted after a
		// crash: that run's sockets are gone.
		return offline(p.Refreshed, p.Refreshed)
	}
	if dead, at := h.nodes.dead(p.Node, time.Now()); dead {
		// The node holding the socket crashed (or stopped without
		// writing offline): the device is not reachable through it. The
		// record is rewritten only every presenceRefresh; the node kept
		// the session open until its last beat, and an open session had a
		// frame within the read deadline.
		return offline(at, p.Refreshed, at)
	}
	stale := time.Duration(p.StaleAfterMS) * time.Millisecond
	if stale <= 0 {
		stale = h.staleAfter()
	}
	if h.cfg.Now().Sub(p.Refreshed) > stale {
		return offline(p.Refreshed, p.Refreshed)
	}
	return out
}

// Revoke revokes a device: its token stops working and every node closes
// its socket with 4003.
func (h *Hub) Revoke(ctx context.Context, id string) (*hubapi.Device, error) {
	if !deviceIDRe.MatchString(id) {
		return nil, errNoDevice
	}
	err := h.st.revokeDevice(ctx, id, h.cfg.Now())
	h.devs.forget(id) // the other nodes forget it on the revoke message
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errNoDevice
	}
	if err != nil {
		return nil, unavailable("revoke the device", err)
	}
	if err := h.nc.Publish(ctlSubject(id), mustJSON(ctlMsg{Op: opRevoke})); err != nil {
		h.log.Error("publish revoke", "err", err)
	}
	_ = h.nc.Flush()
	if err := h.dropDirectory(ctx, id); err != nil {
		h.log.Warn("remove a revoked device's rooms from the directory", "device", id, "err", err)
	}
	h.log.Info("device revoked", "device", id)
	return h.Device(ctx, id)
}

// Unenroll revokes the device that holds token: `roomrelay unenroll` on
// the device, which then forgets its identity. Already revoked is success
// (the device may retry after losing the answer); an unknown token is
// errBadToken.
func (h *Hub) Unenroll(ctx context.Context, token string) (*hubapi.Device, error) {
	if token == "" {
		return nil, errNoToken
	}
	tr, _, err := getJSON[tokenRec](ctx, h.st.tokens, hashSecret("token", token))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errBadToken
	}
	if err != nil {
		return nil, unavailable("check the device token", err)
	}
	d, err := h.Revoke(ctx, tr.DeviceID)
	if err != nil {
		return nil, err
	}
	h.log.Info("device unenrolled itself", "device", tr.DeviceID)
	return d, nil
}

// Call is one command for a device.
type Call struct {
	ID      string // optional: a retry with the same id joins the first run
	Device  string
	Project string
	Name    string
	Args    json.RawMessage
	Timeout time.Duration // 0: DefaultCommandTimeout; at most MaxCommandTimeout
	// Caller names who sends it, for the device owner's eyes (a proposal
	// shows it); "" is the admin API.
	Caller string
}

// requestSlack is added to a command's deadline for the NATS request, so an
// agent's own "expired" answer (sent at the deadline) still gets through.
const requestSlack = 500 * time.Millisecond

// Command sends a command to the device and waits for its result: the
// device's own, or one the hub made (not_found for an unknown device,
// not_enrolled, device_offline when no node holds its socket, expired when
// no answer came by the deadline, invalid_args for a malformed call). It
// refuses unknown command names before routing. A proposal id a propose_*
// command returned is recorded, so WaitProposal can tell it from a typo.
func (h *Hub) Command(ctx context.Context, c Call) (result *relay.Result) {
	start := time.Now()
	defer func() { h.metrics.commandDone(c.Name, result, time.Since(start)) }()
	if c.ID == "" {
		c.ID = newID("cmd-")
	}
	fail := func(code relay.Code, format string, a ...any) *relay.Result {
		return &relay.Result{ID: c.ID, Error: relay.Errorf(code, format, a...)}
	}
	switch {
	case !relay.ValidID(c.ID):
		return fail(relay.CodeInvalidArgs, "id must be %s", relay.IDRule)
	case c.Name == "":
		return fail(relay.CodeInvalidArgs, "name is required")
	case !relay.KnownCommand(c.Name):
		return fail(relay.CodeCommandNotAllowed, "%q is not a roomrelay command (known: %v)", relay.Clip(c.Name, 64), relay.CommandNames())
	case c.Project == "":
		return fail(relay.CodeInvalidArgs, "project_id is required")
	case !relay.ValidID(c.Project):
		return fail(relay.CodeInvalidArgs, "project_id must be %s", relay.IDRule)
	case len(c.Args) > 0 && !isObject(c.Args):
		return fail(relay.CodeInvalidArgs, "args must be a JSON object")
	case !utf8.Valid(c.Args):
		// The frame would not be valid UTF-8, and the agent closes its
		// socket on such a frame (RFC 6455: 1007).
		return fail(relay.CodeInvalidArgs, "args must be valid UTF-8")
	case c.Timeout < 0 || c.Timeout > MaxCommandTimeout:
		return fail(relay.CodeInvalidArgs, "timeout_ms must be between 1 and %d", MaxCommandTimeout.Milliseconds())
	case !deviceIDRe.MatchString(c.Device):
		return fail(relay.CodeNotFound, "no device %s is enrolled on this hub", relay.Clip(c.Device, 64))
	}
	if err := checkArgIDs(c.Args); err != nil {
		return &relay.Result{ID: c.ID, Error: err}
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultCommandTimeout
	}
	d, err := h.devs.get(ctx, c.Device, h.st.device)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return fail(relay.CodeNotFound, "no device %s is enrolled on this hub", c.Device)
	case err != nil:
		h.log.Error("read device for command", "err", err)
		return fail(relay.CodeInternal, "the hub could not read the device; retry")
	case d.revoked:
		return fail(relay.CodeNotEnrolled, "device %s was revoked; enroll it again", c.Device)
	case !d.hasProject(c.Project):
		return fail(relay.CodeNotEnrolled, "device %s is not enrolled for project %s: `roomrelay hub pair --project %s`, then `roomrelay enroll` on the device", c.Device, c.Project, c.Project)
	}
	if c.Caller == "" {
		c.Caller = "the hub's admin API"
	}
	cmd := relay.Command{ID: c.ID, ProjectID: c.Project, Name: c.Name, Args: c.Args,
		Deadline: h.cfg.Now().Add(c.Timeout).UTC(), Caller: relay.CleanLine(c.Caller, relay.MaxCallerBytes)}
	// The agent reads frames up to the same limit: a command whose frame
	// is larger would make it drop its socket.
	// (The envelope beyond the args is under 1 KiB: encode only near it.)
	if len(c.Args)+1024 > h.cfg.MaxFrame {
		if frame, err := relay.Encode(&cmd); err != nil || len(frame) > h.cfg.MaxFrame {
			return fail(relay.CodeInvalidArgs, "the command is %d bytes as a frame; a device accepts frames up to %d bytes (max frame)", len(frame), h.cfg.MaxFrame)
		}
	}
	res := h.route(ctx, c.Device, &cmd, c.Timeout)
	if res.Error == nil && relay.ProposalCommand(c.Name) {
		h.noteProposal(ctx, c.Device, res)
	}
	return res
}

// MaxIDBytes bounds the ids a command's arguments name (room_id,
// instance_id), as the policy's id syntax does: the hub refuses longer ones
// before routing, so they never reach a device or its audit log.
const MaxIDBytes = 128

func checkArgIDs(args json.RawMessage) *relay.Error {
	if len(args) == 0 {
		return nil
	}
	var ids struct {
		RoomID     json.RawMessage `json:"room_id"`
		InstanceID json.RawMessage `json:"instance_id"`
	}
	if json.Unmarshal(args, &ids) != nil {
		return nil // the device's own validation names what is wrong
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"room_id", ids.RoomID}, {"instance_id", ids.InstanceID}} {
		var v string
		if len(f.raw) > 0 && json.Unmarshal(f.raw, &v) == nil && len(v) > MaxIDBytes {
			return relay.Errorf(relay.CodeInvalidArgs, "%s is %d bytes (%s: maxLength %d)", f.name, len(v), f.name, MaxIDBytes)
		}
	}
	return nil
}

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// Readiness reports why this node cannot serve, or nil: it is draining, its
// NATS connection is down, or a KV write and read back fail. /v1/readyz
// answers it; /v1/healthz stays liveness only.
func (h *Hub) Readiness(ctx context.Context) error {
	h.mu.Lock()
	closing := h.closing
	h.mu.Unlock()
	if closing {
		return errors.New("draining: this node is shutting down")
	}
	if st := h.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("NATS is %s", strings.ToLower(st.String()))
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	key := "readyz." + nodeKey(h.cfg.NodeName)
	stamp := h.cfg.Now().UTC().Format(time.RFC3339Nano)
	if _, err := h.st.presence.Put(ctx, key, []byte(stamp)); err != nil {
		return fmt.Errorf("a KV write failed: %v", err)
	}
	e, err := h.st.presence.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("a KV read failed: %v", err)
	}
	if string(e.Value()) != stamp {
		return errors.New("a KV read did not return what was written")
	}
	return nil
}
