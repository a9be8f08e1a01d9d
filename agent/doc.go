// Package agent is the roomrelay device daemon core: the connection
// supervisor that keeps one outbound websocket to the hub, and the dispatcher
// that runs the commands the hub relays, at most once.
//
// The supervisor dials {hub}/v1/agent/connect with the device token, sends
// hello, waits for welcome and then keeps the link alive with ping/pong and
// read deadlines derived from the welcome's heartbeat. It reconnects with
// exponential backoff and full jitter, resets the backoff only after a
// connection stayed up for a while, reconnects at once when the wall clock
// jumps (the machine woke from sleep), obeys drain, and stops for good on a
// 401 or a revoke close (ErrNeedsEnrollment) or a protocol version mismatch
// (ErrProtocolVersion) instead of spinning.
//
// The dispatcher denies by default: only registered handlers run, only when
// the Guard allows them, only before their deadline, at most MaxInFlight at a
// time. Every command id is persisted in a small SQLite file in the state
// directory before its handler starts, so a redelivery (also after a restart)
// gets the stored result and never runs the handler a second time.
//
// Events the device reports (state, directory, policy, provider, audit
// head) go through a persisted outbox that coalesces state-like kinds; the
// status file (StatusFile) lets `roomrelay status` in another process see
// the live state. The names of the device's other files (PolicyFile,
// RoomsDB, AuditDir, ReconnectFile) are declared here so the daemon and the
// device workflows (agent/device) share them without importing each other.
//
// Every goroutine is started by (*Agent).Run and has ended when Run returns.
package agent
