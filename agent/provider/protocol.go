package provider

import (
	"encoding/json"

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

// AppInfo is who the provider said it is, cleaned and bounded.
type AppInfo struct {
	Name         string       `json:"name"`
	Version      string       `json:"version"`
	Capabilities Capabilities `json:"capabilities"`
}

// Capabilities are the optional parts of the protocol an app implements.
type Capabilities struct {
	Install       bool `json:"install"`
	Files         bool `json:"files"`
	BuildState    bool `json:"build_state"`
	Notifications bool `json:"notifications"`
}

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
