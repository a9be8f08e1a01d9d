package provider

import (
	"context"

	"github.com/roomrelay/roomrelay/agent/rooms"
)

// Rooms is what the daemon's handlers read Room data through, whichever
// provider the owner selected. Results are roomrelay's slim structs.
type Rooms interface {
	ReadRoom(ctx context.Context, projectID, roomID string) (rooms.RoomSummary, error)
	ListRoomApps(ctx context.Context, projectID, roomID string, limit int, cursor string) (rooms.AppPage, error)
	ReadRoomAppStatus(ctx context.Context, projectID, roomID, instanceID string) (rooms.AppStatus, error)
	// AppFiles is for a smoke-run on the device only; never sent to the hub.
	AppFiles(ctx context.Context, projectID, roomID, instanceID string) (map[string]string, error)
	SetBuildState(ctx context.Context, projectID, roomID, instanceID, contentHash string, b rooms.Build) error
}

var (
	_ Rooms = Builtin{}
	_ Rooms = (*App)(nil)
)

// Builtin is the provider of headless devices, the demo and tests:
// roomrelay's own SQLite store.
type Builtin struct{ Store *rooms.Store }

func (b Builtin) ReadRoom(ctx context.Context, projectID, roomID string) (rooms.RoomSummary, error) {
	return b.Store.ReadRoom(ctx, projectID, roomID)
}

func (b Builtin) ListRoomApps(ctx context.Context, projectID, roomID string, limit int, cursor string) (rooms.AppPage, error) {
	return b.Store.ListRoomApps(ctx, projectID, roomID, limit, cursor)
}

func (b Builtin) ReadRoomAppStatus(ctx context.Context, projectID, roomID, instanceID string) (rooms.AppStatus, error) {
	return b.Store.ReadRoomAppStatus(ctx, projectID, roomID, instanceID)
}

func (b Builtin) AppFiles(ctx context.Context, projectID, roomID, instanceID string) (map[string]string, error) {
	return b.Store.AppFiles(ctx, projectID, roomID, instanceID)
}

func (b Builtin) SetBuildState(ctx context.Context, _, _, instanceID, _ string, st rooms.Build) error {
	return b.Store.SetBuildState(ctx, instanceID, st)
}
