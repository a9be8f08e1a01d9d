package localapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/roomrelay/roomrelay/relay"
)

// The local API's error codes: relay's closed set where a command's rule
// refused (its status, retry and hint from relay's table), and the API's
// own beyond it, whose row is in localCodes below. Every answer names one of
// these constants; apiErr takes the status and retryability from the tables.
const (
	CodeInvalidArgs = string(relay.CodeInvalidArgs)
	CodeNotFound    = string(relay.CodeNotFound)
	CodeRateLimited = string(relay.CodeRateLimited)
	CodeBusy        = string(relay.CodeBusy)
	CodeInternal    = string(relay.CodeInternal)

	CodeForbidden             = "forbidden"               // the peer or the request's shape is refused
	CodeConflict              = "conflict"                // the proposal is no longer in a state that allows this
	CodeHashMismatch          = "hash_mismatch"           // approve named another content hash; still pending
	CodePreconditionFailed    = "precondition_failed"     // If-Match missing or stale
	CodeUnsupportedAPIVersion = "unsupported_api_version" // a path under another major version
	CodeTooLarge              = "too_large"               // the body is over MaxBody
	CodeUnavailable           = "unavailable"             // the feature is not running in this agent
	CodeMethodNotAllowed      = "method_not_allowed"
)

// localCodes is the status and retryability of the API's own codes (relay's
// come from relay's table). precondition_failed is 412; a missing If-Match
// is the one answer that overrides it, with 428 (RFC 6585 §3).
var localCodes = map[string]struct {
	status    int
	retryable bool
}{
	CodeForbidden:             {http.StatusForbidden, false},
	CodeConflict:              {http.StatusConflict, false},
	CodeHashMismatch:          {http.StatusConflict, false},
	CodePreconditionFailed:    {http.StatusPreconditionFailed, false},
	CodeUnsupportedAPIVersion: {http.StatusNotFound, false},
	CodeTooLarge:              {http.StatusRequestEntityTooLarge, false},
	CodeUnavailable:           {http.StatusServiceUnavailable, true},
	CodeMethodNotAllowed:      {http.StatusMethodNotAllowed, false},
}

// codeStatus is code's status and retryability: the local table for the
// API's own codes, relay's for the rest.
func codeStatus(code string) (int, bool) {
	if c, ok := localCodes[code]; ok {
		return c.status, c.retryable
	}
	return relay.Code(code).HTTPStatus(), relay.Code(code).Retryable()
}

// APIError is the body of every error response:
// {"error":{"code":…,"message":…,"retryable":…}}.
type APIError struct {
	Status    int    `json:"-"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

// apiErr is the answer code gets, with its status and retryability.
func apiErr(code, msg string) *APIError {
	status, retry := codeStatus(code)
	return &APIError{Status: status, Code: code, Message: msg, Retryable: retry}
}

// withStatus is e answered with another status than its code's: only the
// 428 of a missing If-Match (see localCodes).
func withStatus(e *APIError, status int) *APIError {
	e.Status = status
	return e
}

// asAPIError maps an error to its response: an *APIError as it is, a
// relay.Error by its code, anything else internal.
func asAPIError(err error) *APIError {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae
	}
	var re *relay.Error
	if errors.As(err, &re) {
		return &APIError{Status: re.Code.HTTPStatus(), Code: string(re.Code), Message: re.Message, Retryable: re.Retryable}
	}
	return apiErr(CodeInternal, err.Error())
}

func writeError(w http.ResponseWriter, e *APIError) {
	writeJSON(w, e.Status, map[string]*APIError{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"` + CodeInternal + `","message":"encoding the response failed","retryable":true}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
