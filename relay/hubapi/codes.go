package hubapi

import (
	"net/http"

	"github.com/roomrelay/roomrelay/relay"
)

// The hub's own error codes: what its admin and device API answer besides
// a command's result (whose codes are relay's closed set). A client
// compares against these (agent/device's enrollment tells a revoked token
// from an unknown one); the hub writes only these.
const (
	CodeUnauthorized        = "unauthorized"    // no bearer token, or not the admin token
	CodeInvalidToken        = "invalid_token"   // the device token is not one the hub issued
	CodeRevoked             = "revoked"         // the device token was revoked
	CodeInvalidRequest      = "invalid_request" // the body or a parameter breaks a rule the message names
	CodeNotFound            = string(relay.CodeNotFound)
	CodeRateLimited         = string(relay.CodeRateLimited)
	CodeInternal            = string(relay.CodeInternal)
	CodeTooLarge            = "too_large"            // the body is over the endpoint's bound
	CodeUnavailable         = "unavailable"          // the hub could not reach its storage
	CodeStarting            = "starting"             // this node is not ready yet
	CodeShuttingDown        = "shutting_down"        // this node is draining
	CodeWebsocketRequired   = "websocket_required"   // the agent endpoint without an upgrade
	CodeSubprotocolRequired = "subprotocol_required" // the upgrade without roomrelay's subprotocol
	CodePairingCodeUnknown  = "pairing_code_unknown"
	CodePairingCodeUsed     = "pairing_code_used"
	CodePairingCodeExpired  = "pairing_code_expired"
)

// hubCodeStatus is the HTTP status of each of the hub's own codes (those
// shared with relay's closed set take relay's).
var hubCodeStatus = map[string]int{
	CodeUnauthorized:        http.StatusUnauthorized,
	CodeInvalidToken:        http.StatusUnauthorized,
	CodeRevoked:             http.StatusUnauthorized,
	CodeInvalidRequest:      http.StatusBadRequest,
	CodeTooLarge:            http.StatusRequestEntityTooLarge,
	CodeUnavailable:         http.StatusServiceUnavailable,
	CodeStarting:            http.StatusServiceUnavailable,
	CodeShuttingDown:        http.StatusServiceUnavailable,
	CodeWebsocketRequired:   http.StatusUpgradeRequired,
	CodeSubprotocolRequired: http.StatusUpgradeRequired,
	CodePairingCodeUnknown:  http.StatusNotFound,
	CodePairingCodeUsed:     http.StatusConflict,
	CodePairingCodeExpired:  http.StatusGone,
	CodeOAuthOff:            http.StatusNotFound,
}

// Status is the HTTP status the hub answers code with: the hub's own
// codes from the table above, relay's from relay's table (500 for a code in
// neither).
func Status(code string) int {
	if s, ok := hubCodeStatus[code]; ok {
		return s
	}
	return relay.Code(code).HTTPStatus()
}
