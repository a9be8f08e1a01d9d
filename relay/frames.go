package relay

import (
	"encoding/json"
	"time"
)

// Protocol identity. The websocket subprotocol carries the major version; the
// hello frame repeats it so a mismatch is refused with a readable close reason.
const (
	ProtocolVersion = 1
	Subprotocol     = "roomrelay.v1"
	// ConnectPath is where the agent dials the hub.
	ConnectPath = "/v1/agent/connect"
)

// Frame types.
const (
	TypeHello   = "hello"
	TypeWelcome = "welcome"
	TypeCommand = "command"
	TypeResult  = "result"
	TypeCancel  = "cancel"
	TypeEvent   = "event"
	TypeDrain   = "drain"
)

// Frame is any protocol frame. Each concrete type knows its "type" value.
type Frame interface{ FrameType() string }

// ProjectPolicy is what a device allows for one project, as summarised in
// hello and in policy_changed events. The hub uses it to refuse early and to
// show what a device serves; the agent still decides every command itself.
type ProjectPolicy struct {
	Project  string   `json:"project"`
	Commands []string `json:"commands"`
}

// RoomEntry is one room of the device's directory: a room the device serves
// (its project enabled, the room allowed by the policy), by id and name only.
type RoomEntry struct {
	Project string `json:"project"`
	RoomID  string `json:"room_id"`
	Name    string `json:"name"`
}

// MaxDirectoryRooms bounds a device's directory; MaxRoomNameBytes a name in
// it. A hub keeps at most this many entries of one device.
const (
	MaxDirectoryRooms = 500
	MaxRoomNameBytes  = 200
)

// Hello is the agent's first frame. Rooms is the device's room directory,
// always sent (an empty list is "no rooms"); an agent older than the
// directory sends no field, which a hub reads as "no directory" and leaves
// alone. A hub older than it ignores the field.
type Hello struct {
	Protocol     int             `json:"protocol"`
	AgentVersion string          `json:"agent_version"`
	DeviceID     string          `json:"device_id"`
	OS           string          `json:"os"`
	Policy       []ProjectPolicy `json:"policy"`
	Rooms        []RoomEntry     `json:"rooms"`
	// Provider says where the device's Rooms come from and whether that
	// source is reachable (#21); absent from an older agent, ignored by an
	// older hub.
	Provider *ProviderState `json:"provider,omitempty"`
	// AuditHead is where the device's audit log ends (optional: a hub
	// ignores it if absent or malformed).
	AuditHead *AuditHead `json:"audit_head,omitempty"`
}

// ProviderState is the device's room provider as the hub is told of it: in
// hello, and in provider_changed events.
type ProviderState struct {
	Kind      string `json:"kind"`      // "builtin" or "app"
	Connected bool   `json:"connected"` // builtin: always true; app: the desktop app is connected
}

// Welcome is the hub's answer to hello.
type Welcome struct {
	SessionID   string    `json:"session_id"`
	HeartbeatMS int64     `json:"heartbeat_ms"`
	ServerTime  time.Time `json:"server_time"`
}

// Heartbeat returns the interval as a duration.
func (w *Welcome) Heartbeat() time.Duration { return time.Duration(w.HeartbeatMS) * time.Millisecond }

// Command asks the agent to run one allowlisted command.
type Command struct {
	ID        string          `json:"id"`
	ProjectID string          `json:"project_id"`
	Name      string          `json:"name"`
	Args      json.RawMessage `json:"args,omitempty"`
	Deadline  time.Time       `json:"deadline"`
	// Caller is who sent the command, as the hub names it (an MCP client
	// token's name and id, or the admin API), at most MaxCallerBytes. The
	// device shows it to the owner with a proposal; it grants nothing.
	Caller string `json:"caller,omitempty"`
}

// MaxCallerBytes bounds Command.Caller.
const MaxCallerBytes = 160

// Result answers a command.
type Result struct {
	ID     string          `json:"id"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
	// AuditHead is where the device's audit log ended when the result left,
	// the command's own line included once it is durable (a write's always;
	// a read's within the log's group-commit window). Optional and
	// additive like hello's: the hub moves the device's anchor from it
	// before it answers the caller, so the anchor is never behind a
	// command the cloud has seen; an older hub ignores it.
	AuditHead *AuditHead `json:"audit_head,omitempty"`
}

// Cancel asks the agent to stop a running command.
type Cancel struct {
	ID string `json:"id"`
}

// Event kinds sent by the agent.
const (
	EventProposalDecided = "proposal_decided"
	EventPolicyChanged   = "policy_changed"
	EventSleeping        = "sleeping"
	// EventRoomsChanged carries the whole directory again (RoomsChanged)
	// when the policy or the device's rooms change.
	EventRoomsChanged = "rooms_changed"
	// EventProviderChanged carries the ProviderState when the desktop app
	// connects or goes away, or the owner switches provider.
	EventProviderChanged = "provider_changed"
)

// Event tells the hub something happened on the device.
type Event struct {
	Event string          `json:"event"`
	Time  time.Time       `json:"time"`
	Data  json.RawMessage `json:"data,omitempty"`
}

// Drain asks the agent to move to a new session after AfterMS
// milliseconds: it opens the new one (the draining node refuses it, so a
// load balancer sends it elsewhere) and keeps serving on this one until
// then (make-before-break). Once the new session took over, the draining
// node sends a second Drain with Reason DrainHandedOver on the old one:
// no command follows it, so the agent closes that socket when the commands
// it already got have answered.
type Drain struct {
	AfterMS int64  `json:"after_ms"`
	Reason  string `json:"reason,omitempty"`
}

// DrainHandedOver is the Reason of the Drain that ends a handed-over
// session.
const DrainHandedOver = "handed over to the new session"

func (*Hello) FrameType() string   { return TypeHello }
func (*Welcome) FrameType() string { return TypeWelcome }
func (*Command) FrameType() string { return TypeCommand }
func (*Result) FrameType() string  { return TypeResult }
func (*Cancel) FrameType() string  { return TypeCancel }
func (*Event) FrameType() string   { return TypeEvent }
func (*Drain) FrameType() string   { return TypeDrain }

// ProposalDecided is the Data of a proposal_decided event: the owner approved
// or declined a proposal on the device.
type ProposalDecided struct {
	ProposalID string    `json:"proposal_id"`
	Project    string    `json:"project"`
	RoomID     string    `json:"room_id"`
	State      string    `json:"state"` // approved or declined
	InstanceID string    `json:"instance_id,omitempty"`
	DecidedAt  time.Time `json:"decided_at"`
}

// PolicyChanged is the Data of a policy_changed event.
type PolicyChanged struct {
	Policy []ProjectPolicy `json:"policy"`
}

// RoomsChanged is the Data of a rooms_changed event: the device's whole
// directory, which replaces what the hub had.
type RoomsChanged struct {
	Rooms []RoomEntry `json:"rooms"`
}
