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
// a caller may retry, the process exit code the CLI ends with when a command
// fails with it (`roomrelay hub call`, and the commands that go through the
// local API), and the hint that tells a model (the MCP front) or a person
// what to do next; the message says what happened. No other file maps a code
// to a status, a retry, an exit code or a hint (the MCP front's
// TestEveryDeviceCodeIsAToolError runs every code through the hub's API, the
// MCP front and the CLI; agent/localapi's TestEveryDeviceCodeOnTheLocalAPI
// through the local API).
//
// busy is 503, not 429: it says the device is at its own capacity (commands
// in flight, local API connections), which is the server being temporarily
// unable (RFC 9110 §15.6.4); 429 is rate_limited, the caller sending too much
// (RFC 6585 §4). The local API always answered busy with 503; the hub's
// command API said 429 and now agrees.
//
// The exit codes are BSD sysexits(3)'s: a script tells "try again later"
// (75) from "not allowed" (77) from "fix the input" (65) without parsing
// text. A code outside the table exits 1 (ExitCode).
var codeInfo = map[Code]struct {
	status    int
	retryable bool
	exit      int
	hint      string
}{
	CodeNotEnrolled:         {403, false, ExitNoPerm, "The laptop is not enrolled for this project; tell the user."},
	CodeDeviceOffline:       {503, true, ExitTempFail, "Tell the user the laptop is offline; do not retry until they say it is back."},
	CodeProjectNotEnabled:   {403, false, ExitNoPerm, "The owner has not enabled this project on that laptop (`roomrelay enable PROJECT`)."},
	CodeCommandNotAllowed:   {403, false, ExitNoPerm, "Not allowed by the device owner or this token; tell the user."},
	CodeInvalidArgs:         {400, false, ExitDataErr, "Fix the arguments as the message says and call again."},
	CodeNotFound:            {404, false, ExitNoInput, "Check the id with list_local_rooms or list_room_apps."},
	CodePendingReview:       {409, false, ExitTempFail, "It waits for the owner's approval on the laptop (`roomrelay review`)."},
	CodeIdempotencyConflict: {409, false, ExitDataErr, "This key was used for other content; derive the key from the content."},
	CodeExpired:             {504, true, ExitTempFail, "The laptop did not answer in time; retry once."},
	CodeBusy:                {503, true, ExitTempFail, "The laptop is busy; retry shortly."},
	CodeRateLimited:         {429, true, ExitTempFail, "Wait as the message says before calling again."},
	CodeSandboxFailed:       {422, false, ExitDataErr, "Fix the snippet at the location given and propose it again."},
	CodeAppNotRunning:       {503, true, ExitTempFail, "Tell the user the desktop app is closed on their laptop (the relay is online) and ask them to open it; do not retry until they say it is open."},
	CodeInternal:            {500, true, ExitSoftware, "Retry once; if it persists, tell the user."},
}

// Process exit codes a command's failure maps to (sysexits(3)); ExitFailed
// is a failure without a code of the closed set.
const (
	ExitFailed   = 1  // failed, without a code of the closed set
	ExitDataErr  = 65 // EX_DATAERR: the arguments or content are wrong (invalid_args, idempotency_conflict, sandbox_failed)
	ExitNoInput  = 66 // EX_NOINPUT: what the command names does not exist (not_found)
	ExitSoftware = 70 // EX_SOFTWARE: the device failed internally (internal)
	ExitTempFail = 75 // EX_TEMPFAIL: try again later (offline, busy, rate limited, expired, app not running, pending review)
	ExitNoPerm   = 77 // EX_NOPERM: not enrolled, not enabled, not allowed
)

// Valid reports whether c is in the closed set.
func (c Code) Valid() bool { _, ok := codeInfo[c]; return ok }

// Retryable reports whether a caller may retry a command that failed with c.
func (c Code) Retryable() bool { return codeInfo[c].retryable }

// Hint is a sentence saying what to do next (the MCP front appends it to a
// tool error).
func (c Code) Hint() string { return codeInfo[c].hint }

// ExitCode is the process exit code a CLI command that failed with c ends
// with; ExitFailed (1) for a code outside the closed set.
func (c Code) ExitCode() int {
	if i, ok := codeInfo[c]; ok {
		return i.exit
	}
	return ExitFailed
}

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
