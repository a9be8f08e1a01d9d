package hub

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// This file is the HTTP API: thin handlers over the Go API in service.go.
// A handler decodes, calls one method, and writes the answer or returns
// the error for writeErr to map.

const maxSmallBody = 64 << 10

func (h *Hub) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+relay.ConnectPath, h.handleConnect)
	mux.HandleFunc("POST /v1/enroll", h.api(h.handleEnroll))
	// The device's own token: `roomrelay doctor` checks it and the clock.
	mux.HandleFunc("GET /v1/device", h.api(func(w http.ResponseWriter, r *http.Request) error {
		d, err := h.st.deviceForToken(r.Context(), bearer(r))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, hubapi.DeviceSelf{DeviceID: d.ID, Projects: d.Projects, ServerTime: h.cfg.Now().UTC()})
		return nil
	}))
	// The device's own token: the audit anchor (audithead.go).
	mux.HandleFunc("GET /v1/device/audit-head", h.api(h.handleAuditHead))
	// The device's own token: `roomrelay unenroll`.
	mux.HandleFunc("POST /v1/unenroll", h.api(func(w http.ResponseWriter, r *http.Request) error {
		d, err := h.Unenroll(r.Context(), bearer(r))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, d)
		return nil
	}))
	mux.HandleFunc("POST /v1/pairing-codes", h.admin(h.handlePair))
	mux.HandleFunc("GET /v1/devices", h.admin(h.handleDevices))
	mux.HandleFunc("GET /v1/devices/{id}", h.admin(h.handleDevice))
	mux.HandleFunc("POST /v1/devices/{id}/revoke", h.admin(h.handleRevoke))
	mux.HandleFunc("POST /v1/devices/{id}/commands", h.admin(h.handleCommand))
	mux.HandleFunc("GET /v1/devices/{id}/proposals/{pid}", h.admin(h.handleProposal))
	mux.HandleFunc("POST /v1/client-tokens", h.admin(h.handleTokenCreate))
	mux.HandleFunc("GET /v1/client-tokens", h.admin(h.handleTokenList))
	mux.HandleFunc("POST /v1/client-tokens/{id}/revoke", h.admin(h.handleTokenRevoke))
	// Prometheus format; --metrics-listen serves the same without a token on
	// an operator's internal address.
	mux.HandleFunc("GET /metrics", h.admin(func(w http.ResponseWriter, r *http.Request) error {
		h.MetricsHandler().ServeHTTP(w, r)
		return nil
	}))
	mux.HandleFunc("GET /v1/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "node": h.cfg.NodeName})
	})
	mux.HandleFunc("GET /v1/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := h.Readiness(r.Context()); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not_ready", "node": h.cfg.NodeName, "reason": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "node": h.cfg.NodeName})
	})
	return mux
}

type apiFunc func(w http.ResponseWriter, r *http.Request) error

// api adapts a handler that returns its error.
func (h *Hub) api(fn apiFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			h.writeErr(w, r, err)
		}
	}
}

// admin guards a handler with the admin token (constant-time compare of
// digests, so neither content nor length leaks through timing).
func (h *Hub) admin(fn apiFunc) http.HandlerFunc {
	want := sha256.Sum256([]byte(h.cfg.AdminToken))
	next := h.api(fn)
	return func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r)
		got := sha256.Sum256([]byte(tok))
		if tok == "" || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="roomrelay-admin"`)
			writeError(w, hubapi.CodeUnauthorized, "this endpoint needs the hub's admin token as a bearer token")
			return
		}
		next(w, r)
	}
}

// writeErr answers an error from the Go API: an *Error as it says, a device
// token failure per RFC 6750, a storage failure 503 (cause logged).
func (h *Hub) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	var he *Error
	var ue *unavailableError
	switch {
	case errors.As(err, &he):
		if he.Code == hubapi.CodeRateLimited {
			w.Header().Set("Retry-After", "60")
		}
		writeJSON(w, he.status(), hubapi.ErrorBody{Error: hubapi.ErrorDetail{Code: he.Code, Message: he.Message}})
	case errors.Is(err, errNoToken), errors.Is(err, errBadToken), errors.Is(err, errRevokedToken):
		h.writeAuthError(w, err)
	case r.Context().Err() != nil:
		// The caller left or the hub is stopping: nobody reads an answer.
	case errors.As(err, &ue):
		h.log.Error(ue.Public(), "path", r.URL.Path, "err", ue.err)
		writeError(w, hubapi.CodeUnavailable, ue.Public())
	default:
		h.log.Error("request failed", "path", r.URL.Path, "err", err)
		writeError(w, hubapi.CodeInternal, "the hub failed to answer; retry, and tell its operator if it persists")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers one of the hub's codes with its status (hubapi.Status).
func writeError(w http.ResponseWriter, code, msg string) {
	writeJSON(w, hubapi.Status(code), hubapi.ErrorBody{Error: hubapi.ErrorDetail{Code: code, Message: msg}})
}

func bearer(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// decodeBody reads a JSON body of at most limit bytes into v.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &Error{Code: hubapi.CodeTooLarge, Message: fmt.Sprintf("request body exceeds %d bytes", limit)}
		}
		return errInvalid("request body is not the expected JSON: %v", err)
	}
	return nil
}

func (h *Hub) authDevice(ctx context.Context, r *http.Request) (*deviceRec, error) {
	tok := bearer(r)
	if tok == "" {
		return nil, errNoToken
	}
	return h.st.deviceForToken(ctx, tok)
}

// writeAuthError answers a failed device authentication per RFC 6750.
func (h *Hub) writeAuthError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errNoToken):
		w.Header().Set("WWW-Authenticate", `Bearer realm="roomrelay"`)
		writeError(w, hubapi.CodeUnauthorized, "send the device token as Authorization: Bearer <token>; enroll with `roomrelay enroll` to get one")
	case errors.Is(err, errBadToken), errors.Is(err, errRevokedToken):
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="roomrelay", error="invalid_token", error_description=%q`, err.Error()))
		code := hubapi.CodeInvalidToken
		if errors.Is(err, errRevokedToken) {
			code = hubapi.CodeRevoked
		}
		writeError(w, code, err.Error()+"; run `roomrelay enroll` with a new pairing code")
	default:
		h.log.Error("device auth", "err", err)
		writeError(w, hubapi.CodeUnavailable, "the hub could not check the token; retry")
	}
}

func (h *Hub) handlePair(w http.ResponseWriter, r *http.Request) error {
	var req hubapi.PairingRequest
	if err := decodeBody(w, r, maxSmallBody, &req); err != nil {
		return err
	}
	if req.TTLSeconds < 0 {
		return errInvalid("ttl_seconds must be between 1 and %d", int(MaxPairingTTL/time.Second))
	}
	pc, err := h.Pair(r.Context(), req.Project, time.Duration(req.TTLSeconds)*time.Second)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, pc)
	return nil
}

func (h *Hub) handleEnroll(w http.ResponseWriter, r *http.Request) error {
	var req hubapi.EnrollRequest
	if err := decodeBody(w, r, maxSmallBody, &req); err != nil {
		return err
	}
	addr := h.ClientAddr(r)
	out, err := h.Enroll(r.Context(), req, bearer(r), addr)
	if err != nil {
		var he *Error
		if errors.As(err, &he) && he.Code == hubapi.CodeRateLimited {
			if _, retry := h.enrollLim.blocked(addr); retry > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(retry.Seconds())+1))
			}
			writeError(w, he.Code, he.Message)
			return nil
		}
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Hub) handleDevices(w http.ResponseWriter, r *http.Request) error {
	ds, err := h.Devices(r.Context(), r.URL.Query().Get("project"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, hubapi.DeviceList{Devices: ds})
	return nil
}

func (h *Hub) handleDevice(w http.ResponseWriter, r *http.Request) error {
	d, err := h.Device(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (h *Hub) handleRevoke(w http.ResponseWriter, r *http.Request) error {
	d, err := h.Revoke(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

// StatusFor is the HTTP status of POST /v1/devices/{id}/commands for a
// command's result: its error code's, from relay's table.
func StatusFor(res *relay.Result) int {
	if res.OK {
		return http.StatusOK
	}
	if res.Error == nil {
		return http.StatusInternalServerError
	}
	return res.Error.Code.HTTPStatus()
}

func (h *Hub) handleCommand(w http.ResponseWriter, r *http.Request) error {
	var req hubapi.CommandRequest
	if err := decodeBody(w, r, int64(h.cfg.MaxFrame), &req); err != nil {
		return err
	}
	if req.TimeoutMS < 0 || req.TimeoutMS > MaxCommandTimeout.Milliseconds() {
		req.TimeoutMS = -1 // Command refuses it with invalid_args
	}
	wait := DefaultCommandTimeout
	if req.TimeoutMS > 0 {
		wait = time.Duration(req.TimeoutMS) * time.Millisecond
	}
	extendWrite(w, wait+requestSlack+10*time.Second)
	res := h.Command(r.Context(), Call{ID: req.ID, Device: r.PathValue("id"), Project: req.ProjectID,
		Name: req.Name, Args: req.Args, Timeout: time.Duration(req.TimeoutMS) * time.Millisecond})
	writeResult(w, res)
	return nil
}

// writeResult answers a command with its result: as writeJSON would, with
// an ok result's payload copied as it came (encodeReply).
func writeResult(w http.ResponseWriter, res *relay.Result) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(StatusFor(res))
	_, _ = w.Write(append(encodeReply(res), '\n'))
}

// handleProposal answers GET /v1/devices/{id}/proposals/{pid}[?wait=30s].
func (h *Hub) handleProposal(w http.ResponseWriter, r *http.Request) error {
	wait, err := parseWait(r.URL.Query().Get("wait"))
	if err != nil {
		return errInvalid("%v", err)
	}
	extendWrite(w, wait+10*time.Second)
	st, err := h.WaitProposal(r.Context(), r.PathValue("id"), r.PathValue("pid"), wait)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}
