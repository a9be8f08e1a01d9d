package localapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/roomrelay/roomrelay/relay"
)

// Error codes of the local API beyond relay's closed set (which it also
// uses: invalid_args, not_found, rate_limited, busy, internal).
const (
	CodeForbidden             = "forbidden"               // the peer or the request's shape is refused
	CodeConflict              = "conflict"                // the proposal is no longer in a state that allows this
	CodeHashMismatch          = "hash_mismatch"           // approve named another content hash; still pending
	CodePreconditionFailed    = "precondition_failed"     // If-Match missing or stale
	CodeUnsupportedAPIVersion = "unsupported_api_version" // a path under another major version
	CodeTooLarge              = "too_large"               // the body is over MaxBody
	CodeUnavailable           = "unavailable"             // the feature is not running in this agent
	CodeMethodNotAllowed      = "method_not_allowed"
)

// APIError is the body of every error response:
// {"error":{"code":…,"message":…,"retryable":…}}.
type APIError struct {
	Status    int    `json:"-"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

func apiErr(status int, code, msg string) *APIError {
	retry := status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable || status >= 500
	return &APIError{Status: status, Code: code, Message: msg, Retryable: retry}
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
		status := http.StatusInternalServerError
		switch re.Code {
		case relay.CodeNotFound:
			status = http.StatusNotFound
		case relay.CodeInvalidArgs:
			status = http.StatusBadRequest
		case relay.CodeRateLimited:
			status = http.StatusTooManyRequests
		case relay.CodeBusy:
			status = http.StatusServiceUnavailable
		}
		return &APIError{Status: status, Code: string(re.Code), Message: re.Message, Retryable: re.Retryable}
	}
	return apiErr(http.StatusInternalServerError, string(relay.CodeInternal), err.Error())
}

func writeError(w http.ResponseWriter, e *APIError) {
	writeJSON(w, e.Status, map[string]*APIError{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encoding the response failed","retryable":true}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
