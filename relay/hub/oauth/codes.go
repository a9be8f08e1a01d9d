package oauth

import (
	"fmt"
	"net/http"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub"
)

// errCode is an OAuth error code (RFC 6749 §4.1.2.1 and §5.2, RFC 7591
// §3.2.2, RFC 8707 §2): the values this server answers, each once.
type errCode string

const (
	codeInvalidRequest          errCode = "invalid_request"
	codeInvalidGrant            errCode = "invalid_grant"
	codeInvalidScope            errCode = "invalid_scope"
	codeInvalidTarget           errCode = "invalid_target"
	codeUnsupportedGrantType    errCode = "unsupported_grant_type"
	codeUnsupportedResponseType errCode = "unsupported_response_type"
	codeAccessDenied            errCode = "access_denied"
	codeInvalidClientMetadata   errCode = "invalid_client_metadata"
	codeInvalidRedirectURI      errCode = "invalid_redirect_uri"
	codeTemporarilyUnavailable  errCode = "temporarily_unavailable"
	// codeRateLimited is not RFC 6749's: a 429 names its rule.
	codeRateLimited errCode = "rate_limited"
)

// oauthErr is an RFC 6749 §5.2 error answer.
type oauthErr struct {
	status int
	code   errCode
	desc   string
	wait   time.Duration // a 429's Retry-After
}

func (e *oauthErr) Error() string { return string(e.code) + ": " + e.desc }

func bad(code errCode, format string, a ...any) *oauthErr {
	return &oauthErr{status: http.StatusBadRequest, code: code, desc: fmt.Sprintf(format, a...)}
}

// unavailable is a storage failure: 503, the cause logged.
func unavailable(what string, err error) error { return hub.Unavailable(what, err) }

// The hub API's error codes the device-approval and admin endpoints answer
// (the hub's error body, {"error":{"code","message"}}, not OAuth's).
const (
	apiInvalidRequest = "invalid_request"
	apiNotFound       = "not_found"
	apiForbidden      = "forbidden"
	apiConflict       = "already_decided"
	apiRemoved        = "removed"
)

func apiErr(status int, code, msg string) *hub.Error {
	return &hub.Error{Status: status, Code: code, Message: msg}
}
