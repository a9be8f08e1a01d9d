package provider

import (
	"encoding/json"
	"time"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/relay"
)

// Subprotocol is the websocket subprotocol the app must offer.
const Subprotocol = "roomrelay.provider.v1"

// ProtocolVersion is the one provider protocol version this build speaks.
const ProtocolVersion = 1

// Close codes roomrelay sends (docs/provider-protocol.md).
const (
	CloseReplaced      = 4001
	CloseUnsupported   = 4002
	CloseProtocolError = 4003
	CloseNotSelected   = 4004
)

// NotSelectedReason is the 4004 close reason: it names the fix (a close
// reason is at most 123 bytes).
const NotSelectedReason = "provider not selected: PUT /localapi/v1/policy/provider or `roomrelay provider app`"

// Methods of the protocol.
const (
	MethodHello        = "provider.hello"
	MethodRoomsChanged = "rooms.changed"
	MethodAppsChanged  = "apps.changed"
	MethodCancel       = "$/cancelRequest"

	MethodRoomsRead     = "rooms.read"
	MethodAppsList      = "apps.list"
	MethodAppsStatus    = "apps.status"
	MethodAppsFiles     = "apps.files"
	MethodAppsInstall   = "apps.install"
	MethodSetBuildState = "apps.set_build_state"
)

// JSON-RPC 2.0 error codes used here.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
	rpcServerError    = -32000
)

// message is any JSON-RPC 2.0 object: a request (Method and ID), a
// notification (Method, no ID) or a response (ID and Result or Error).
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// relayCode is the closed-set code in an app's error data, or "".
func (e *rpcError) relayCode() relay.Code {
	var d struct {
		Code relay.Code `json:"code"`
	}
	if len(e.Data) == 0 || json.Unmarshal(e.Data, &d) != nil {
		return ""
	}
	return d.Code
}

// AppInfo is who the provider said it is, cleaned and bounded, and
// Capabilities the optional parts of the protocol it implements: agent/events'
// types, because provider_changed carries them as they are.
type (
	AppInfo      = events.AppInfo
	Capabilities = events.Capabilities
)

// helloParams is what roomrelay reads of provider.hello.
type helloParams struct {
	ProtocolVersions []int `json:"protocol_versions"`
	App              struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"app"`
	Capabilities Capabilities `json:"capabilities"`
}

// HelloResult is roomrelay's answer to provider.hello.
type HelloResult struct {
	ProtocolVersion int `json:"protocol_version"`
	Roomrelay       struct {
		Version string `json:"version"`
	} `json:"roomrelay"`
	Projects   []string `json:"projects"`
	HeartbeatS int      `json:"heartbeat_s"`
}

// Room is one entry of the app's directory (rooms.changed), checked.
type Room struct {
	ID      string `json:"id"`
	Project string `json:"project"`
	Name    string `json:"name"`
}

// Bounds of what an app can hand roomrelay.
const (
	maxAppInfoBytes  = 100
	maxCursorBytes   = 512
	maxPhaseBytes    = 40
	maxSummaryBytes  = 300
	maxAppCount      = 1_000_000
	maxAppMessageLog = 200 // bytes of an app's error message kept in the device's log
)

// checkDirectory keeps the valid entries of a rooms.changed, at most
// relay.MaxDirectoryRooms, names cleaned and cut; dropped says how many
// were refused.
func checkDirectory(in []Room) (out []Room, dropped int) {
	out = make([]Room, 0, min(len(in), relay.MaxDirectoryRooms))
	seen := map[string]bool{}
	for _, r := range in {
		if !relay.ValidID(r.ID) || !relay.ValidID(r.Project) || seen[r.ID] || len(out) >= relay.MaxDirectoryRooms {
			dropped++
			continue
		}
		seen[r.ID] = true
		out = append(out, Room{ID: r.ID, Project: r.Project, Name: relay.CleanLine(r.Name, relay.MaxRoomNameBytes)})
	}
	return out, dropped
}

// The params roomrelay sends and the results it reads, one type per
// method: docs/provider-protocol.schema.json is checked against them field
// by field, nested objects included (TestSchemaMatchesGoTypes), so the
// document cannot drift from what roomrelay speaks. A new method is a
// Method constant and its types here, its call in calls.go, its row in
// schema_test.go's wireTypes and its $defs entry in the schema.

// request is the params of a call roomrelay makes; call sets the deadline.
type request interface{ setDeadline(unixMilli int64) }

// callParams is what every request roomrelay sends carries.
type callParams struct {
	// DeadlineMS is the caller's context deadline; every call roomrelay
	// makes has one (e2e checks real calls carry it).
	DeadlineMS int64  `json:"deadline_ms,omitempty"`
	Project    string `json:"project"`
}

func (p *callParams) setDeadline(ms int64) { p.DeadlineMS = ms }

// roomRef is the params of rooms.read, and what names a room in the others.
type roomRef struct {
	callParams
	RoomID string `json:"room_id"`
}

// appRef is the params of apps.status and apps.files.
type appRef struct {
	roomRef
	InstanceID string `json:"instance_id"`
}

type appsListParams struct {
	roomRef
	Limit  int    `json:"limit"`
	Cursor string `json:"cursor"`
}

// appsInstallParams carries files for a snippet, repository_id and
// version_id for a repo.
type appsInstallParams struct {
	roomRef
	ProposalID   string            `json:"proposal_id"`
	InstanceID   string            `json:"instance_id"`
	Name         string            `json:"name"`
	Kind         string            `json:"kind"`
	Files        map[string]string `json:"files,omitempty"`
	RepositoryID *string           `json:"repository_id,omitempty"`
	VersionID    *string           `json:"version_id,omitempty"`
	ContentHash  string            `json:"content_hash"`
	ApprovedAt   string            `json:"approved_at"`
}

type setBuildStateParams struct {
	appRef
	ContentHash string `json:"content_hash"`
	State       string `json:"state"`
	Phase       string `json:"phase"`
	Summary     string `json:"summary"`
	CheckedAt   string `json:"checked_at"`
}

// cancelParams is the $/cancelRequest notification roomrelay sends.
type cancelParams struct {
	ID string `json:"id"`
}

type roomsReadResult struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	AppCount int    `json:"app_count"`
}

type appsListResult struct {
	Apps       []wireApp `json:"apps"`
	NextCursor string    `json:"next_cursor"`
}

type appsStatusResult struct {
	wireApp
	Review struct {
		State      string    `json:"state"`
		ReviewedAt time.Time `json:"reviewed_at"`
	} `json:"review"`
	ContentHash string `json:"content_hash"`
	Build       *struct {
		State     string    `json:"state"`
		Phase     string    `json:"phase"`
		CheckedAt time.Time `json:"checked_at"`
		Summary   string    `json:"summary"`
	} `json:"build"`
}

type appsFilesResult struct {
	Files       map[string]string `json:"files"`
	ContentHash string            `json:"content_hash"`
}

type appsInstallResult struct {
	InstanceID string `json:"instance_id"`
}

// roomsChangedParams is the rooms.changed notification roomrelay reads.
type roomsChangedParams struct {
	Rooms []Room `json:"rooms"`
}
