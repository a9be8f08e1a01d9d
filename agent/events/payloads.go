package events

import (
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// Status is the agent's state: the status file `roomrelay status` reads in
// another process (agent.Status is this type), a status event's data
// (StatusChanged) and the base of the local API's status.
type Status struct {
	State          string    `json:"state"`
	Hub            string    `json:"hub"`
	DeviceID       string    `json:"device_id"`
	SessionID      string    `json:"session_id,omitempty"`
	ConnectedSince time.Time `json:"connected_since,omitzero"`
	LastError      string    `json:"last_error,omitempty"`
	LastErrorAt    time.Time `json:"last_error_at,omitzero"`
	NextRetryAt    time.Time `json:"next_retry_at,omitzero"`
	// Reconnects counts sessions established after the first one.
	Reconnects   int `json:"reconnects"`
	InFlight     int `json:"in_flight"`
	QueuedEvents int `json:"queued_events"`
	// Notes are standing conditions of this run (agent.Config.Notes).
	Notes     []string  `json:"notes,omitempty"`
	PID       int       `json:"pid"`
	UpdatedAt time.Time `json:"updated_at"`
}

// StatusChanged is the data of a status event: the agent's status after a
// change of its connection state. Status is embedded, not sent as a field,
// and is no Payload itself, so StatusResponse, which embeds it too, is
// never mistaken for a status event.
type StatusChanged struct {
	Status
}

// PolicyChanged is the data of a policy_changed event: the enabled
// projects after the reload, and the policy file's revision (its ETag).
type PolicyChanged struct {
	Projects []relay.ProjectPolicy `json:"projects"`
	Revision string                `json:"revision"`
}

// ProposalCreated is the data of a proposal_created event.
type ProposalCreated struct {
	ProposalID  string    `json:"proposal_id"`
	Project     string    `json:"project"`
	RoomID      string    `json:"room_id"`
	Kind        string    `json:"kind"`
	Name        string    `json:"name"`
	ContentHash string    `json:"content_hash"`
	FileCount   int       `json:"file_count"`
	TotalBytes  int64     `json:"total_bytes"`
	ProposedBy  string    `json:"proposed_by,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// ProposalDecided is the data of a proposal_decided event.
type ProposalDecided struct {
	ProposalID  string `json:"proposal_id"`
	Project     string `json:"project"`
	RoomID      string `json:"room_id"`
	State       string `json:"state"`
	ContentHash string `json:"content_hash"`
	InstanceID  string `json:"instance_id,omitempty"`
	// DecidedVia is how the owner decided, when it went through the local
	// API (app or cli); absent for the review page and the CLI on the store.
	DecidedVia string `json:"decided_via,omitempty"`
	// InstallState is an approval's install as it was committed: installed
	// for a builtin room, pending for a room the desktop app provides
	// (install_changed follows).
	InstallState string `json:"install_state,omitempty"`
}

// InstallChanged is the data of an install_changed event: an approved
// app's delivery to the desktop app.
type InstallChanged struct {
	ProposalID   string `json:"proposal_id"`
	InstanceID   string `json:"instance_id"`
	Project      string `json:"project"`
	RoomID       string `json:"room_id"`
	InstallState string `json:"install_state"`
	Error        string `json:"error,omitempty"`
}

// BuildState is the data of a build_state event: a smoke-run's outcome.
type BuildState struct {
	Project     string    `json:"project"`
	RoomID      string    `json:"room_id"`
	InstanceID  string    `json:"instance_id"`
	ContentHash string    `json:"content_hash"`
	State       string    `json:"state"`
	Phase       string    `json:"phase,omitempty"`
	Summary     string    `json:"summary,omitempty"`
	CheckedAt   time.Time `json:"checked_at"`
}

// CommandRan is the data of a command_ran event: never arguments.
type CommandRan struct {
	Command    string `json:"command"`
	Project    string `json:"project"`
	Room       string `json:"room,omitempty"`
	Outcome    string `json:"outcome"` // ok, or the error code
	Denied     bool   `json:"denied"`
	DurationMS int64  `json:"duration_ms"`
	Caller     string `json:"caller,omitempty"`
}

// AppInfo is who a room provider app said it is in its hello, as
// provider_changed tells it (agent/provider's AppInfo is this type).
type AppInfo struct {
	Name         string       `json:"name"`
	Version      string       `json:"version"`
	Capabilities Capabilities `json:"capabilities"`
}

// Capabilities are the optional parts of the provider protocol an app
// implements.
type Capabilities struct {
	Install       bool `json:"install"`
	Files         bool `json:"files"`
	BuildState    bool `json:"build_state"`
	Notifications bool `json:"notifications"`
}

// ProviderChanged is the data of a provider_changed event. PID, Exe and
// Since describe the connection that is the provider now (absent when none
// is): the process as the local API's peer check saw it.
type ProviderChanged struct {
	Connected bool      `json:"connected"`
	App       *AppInfo  `json:"app,omitempty"`
	PID       int       `json:"pid,omitempty"`
	Exe       string    `json:"exe,omitempty"`
	Since     time.Time `json:"since,omitzero"`
}

// ProviderSelected is the data of a provider_selected event: the selection
// now, and the process that made it as the peer check saw it.
type ProviderSelected struct {
	Provider string `json:"provider"`
	PID      int    `json:"pid,omitempty"`
	Exe      string `json:"exe,omitempty"`
}

// ProviderState is the room provider's presence, for status and snapshots.
// PID and Exe are the connected app's process as the peer check saw it (Exe
// only where the OS tells it): for the owner's eyes, never a decision.
type ProviderState struct {
	// Selected is the room provider the owner's policy selects: app or
	// builtin ("" when the agent does not say).
	Selected  string    `json:"selected,omitempty"`
	Connected bool      `json:"connected"`
	App       string    `json:"app,omitempty"`
	Version   string    `json:"version,omitempty"`
	PID       int       `json:"pid,omitempty"`
	Exe       string    `json:"exe,omitempty"`
	Since     time.Time `json:"since,omitzero"`
}

// APIInfo names the local API version the agent serves and the oldest it
// still does.
type APIInfo struct {
	Version string `json:"version"`
	Min     string `json:"min"`
}

// StatusResponse is the local API's GET status, and a snapshot's status:
// the agent's live status, the provider's, the pending proposal count, API
// and boot id.
type StatusResponse struct {
	Status
	Provider         ProviderState `json:"provider"`
	PendingProposals int           `json:"pending_proposals"`
	API              APIInfo       `json:"api"`
	BootID           string        `json:"boot_id"`
}

// Snapshot is the data of a snapshot line: what a client needs to draw its
// state before applying the events after it.
type Snapshot struct {
	Status           StatusResponse `json:"status"`
	ProjectsRevision string         `json:"projects_revision"`
	PendingProposals []string       `json:"pending_proposals"`
	Provider         ProviderState  `json:"provider"`
}

// Resync is the data of a resync line: why the stream cannot resume where
// it was asked to (a snapshot follows).
type Resync struct {
	Reason string `json:"reason"`
}

// Ping is a keepalive line on an idle stream; it has no data.
type Ping struct{}

// EventType implements Payload.
func (StatusChanged) EventType() string    { return TypeStatus }
func (PolicyChanged) EventType() string    { return TypePolicyChanged }
func (ProposalCreated) EventType() string  { return TypeProposalCreated }
func (ProposalDecided) EventType() string  { return TypeProposalDecided }
func (InstallChanged) EventType() string   { return TypeInstallChanged }
func (BuildState) EventType() string       { return TypeBuildState }
func (CommandRan) EventType() string       { return TypeCommandRan }
func (ProviderChanged) EventType() string  { return TypeProviderChanged }
func (ProviderSelected) EventType() string { return TypeProviderSelected }
func (Snapshot) EventType() string         { return TypeSnapshot }
func (Resync) EventType() string           { return TypeResync }
func (Ping) EventType() string             { return TypePing }
