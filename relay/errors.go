package relay

import (
	"errors"
	"fmt"
)

// Code is one of the closed set of error codes a command can fail with.
type Code string

// The closed set of error codes (DESIGN.md, "Wire protocol v1").
const (
	CodeNotEnrolled         Code = "not_enrolled"
	CodeDeviceOffline       Code = "device_offline"
	CodeProjectNotEnabled   Code = "project_not_enabled"
	CodeCommandNotAllowed   Code = "command_not_allowed"
	CodeInvalidArgs         Code = "invalid_args"
	CodeNotFound            Code = "not_found"
	CodePendingReview       Code = "pending_review"
	CodeIdempotencyConflict Code = "idempotency_conflict"
	CodeExpired             Code = "expired"
	CodeBusy                Code = "busy"
	CodeRateLimited         Code = "rate_limited"
	CodeSandboxFailed       Code = "sandbox_failed"
	CodeAppNotRunning       Code = "app_not_running"
	CodeInternal            Code = "internal"
)

// codeInfo is the one table of the closed set: per code, the HTTP status
// every HTTP surface answers it with (the hub's API, the local API), whether
// a caller may retry, and the hint that tells a model (the MCP front) or a
// person what to do next; the message says what happened. No other file maps
// a code to a status, a retry or a hint (TestCodesAgreeOnEverySurface).
//
// busy is 503, not 429: it says the device is at its own capacity (commands
// in flight, local API connections), which is the server being temporarily
// unable (RFC 9110 §15.6.4); 429 is rate_limited, the caller sending too much
// (RFC 6585 §4). The local API always answered busy with 503; the hub's
// command API said 429 and now agrees.
var codeInfo = map[Code]struct {
	status    int
	retryable bool
	hint      string
}{
	CodeNotEnrolled:         {403, false, "The laptop is not enrolled for this project; tell the user."},
	CodeDeviceOffline:       {503, true, "Tell the user the laptop is offline; do not retry until they say it is back."},
	CodeProjectNotEnabled:   {403, false, "The owner has not enabled this project on that laptop (`roomrelay enable PROJECT`)."},
	CodeCommandNotAllowed:   {403, false, "Not allowed by the device owner or this token; tell the user."},
	CodeInvalidArgs:         {400, false, "Fix the arguments as the message says and call again."},
	CodeNotFound:            {404, false, "Check the id with list_local_rooms or list_room_apps."},
	CodePendingReview:       {409, false, "It waits for the owner's approval on the laptop (`roomrelay review`)."},
	CodeIdempotencyConflict: {409, false, "This key was used for other content; derive the key from the content."},
	CodeExpired:             {504, true, "The laptop did not answer in time; retry once."},
	CodeBusy:                {503, true, "The laptop is busy; retry shortly."},
	CodeRateLimited:         {429, true, "Wait as the message says before calling again."},
	CodeSandboxFailed:       {422, false, "Fix the snippet at the location given and propose it again."},
	CodeAppNotRunning:       {503, true, "Tell the user the desktop app is closed on their laptop (the relay is online) and ask them to open it; do not retry until they say it is open."},
	CodeInternal:            {500, true, "Retry once; if it persists, tell the user."},
}

// Valid reports whether c is in the closed set.
func (c Code) Valid() bool { _, ok := codeInfo[c]; return ok }

// Retryable reports whether a caller may retry a command that failed with c.
func (c Code) Retryable() bool { return codeInfo[c].retryable }

// Hint is a sentence saying what to do next (the MCP front appends it to a
// tool error).
func (c Code) Hint() string { return codeInfo[c].hint }

// HTTPStatus is the status an HTTP surface answers c with; 500 for a code
// outside the closed set.
func (c Code) HTTPStatus() int {
	if i, ok := codeInfo[c]; ok {
		return i.status
	}
	return 500
}

// Codes lists the closed set, for documentation and tests.
func Codes() []Code {
	return []Code{CodeNotEnrolled, CodeDeviceOffline, CodeProjectNotEnabled, CodeCommandNotAllowed,
		CodeInvalidArgs, CodeNotFound, CodePendingReview, CodeIdempotencyConflict, CodeExpired,
		CodeBusy, CodeRateLimited, CodeSandboxFailed, CodeAppNotRunning, CodeInternal}
}

// Error is a command failure as it travels in a result frame.
type Error struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf builds an *Error with the code's retryability.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Retryable: code.Retryable()}
}

// AsError maps any error to a wire *Error: an *Error in the chain is kept as
// it is; anything else becomes internal, with its text.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return Errorf(CodeInternal, "%v", err)
}
