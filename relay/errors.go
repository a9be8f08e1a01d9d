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

// codeInfo says, per code, whether a caller may retry and what a person can do.
var codeInfo = map[Code]struct {
	retryable bool
	hint      string
}{
	CodeNotEnrolled:         {false, "enroll the device for this project: `roomrelay hub pair --project P` on the hub, then `roomrelay enroll` on the device"},
	CodeDeviceOffline:       {true, "the device's agent is not connected; ask its owner to start `roomrelay run` (or the service) and try again"},
	CodeProjectNotEnabled:   {false, "the device owner has not enabled this project; they can run `roomrelay enable PROJECT` on the device"},
	CodeCommandNotAllowed:   {false, "the device owner's allowlist does not allow this command for this project"},
	CodeInvalidArgs:         {false, "fix the arguments as the message says and call again"},
	CodeNotFound:            {false, "no such item is visible to this caller"},
	CodePendingReview:       {false, "the item waits for the device owner's review; ask them to approve it on the device"},
	CodeIdempotencyConflict: {false, "this idempotency key was used with other content; derive the key from the content"},
	CodeExpired:             {true, "the command's deadline passed before it could run; send it again with a later deadline"},
	CodeBusy:                {true, "the device is running as many commands as it allows; retry shortly"},
	CodeRateLimited:         {true, "the device owner's rate limit for this project was reached; retry later"},
	CodeSandboxFailed:       {false, "the snippet failed its smoke-run; see the phase and location in the message"},
	CodeAppNotRunning:       {true, "the desktop app is not running on the device (the relay is online); ask its owner to open it, and do not retry until they say it is open"},
	CodeInternal:            {true, "an unexpected error on the device or hub; retry, and check `roomrelay status` on the device"},
}

// Valid reports whether c is in the closed set.
func (c Code) Valid() bool { _, ok := codeInfo[c]; return ok }

// Retryable reports whether a caller may retry a command that failed with c.
func (c Code) Retryable() bool { return codeInfo[c].retryable }

// Hint is a sentence a person can act on.
func (c Code) Hint() string { return codeInfo[c].hint }

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
