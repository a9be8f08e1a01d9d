package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/provider"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
)

// Provider is the room-provider websocket handler, for agent/localapi to
// mount at /localapi/v1/provider (after its peer checks).
func (d *Daemon) Provider() *provider.Server { return d.prov }

// appMode reports whether the owner's policy selects the desktop app as the
// room provider (the provider directive; default builtin).
func (d *Daemon) appMode() bool { return d.policy.Load().Provider() == allowlist.ProviderApp }

// source is the provider Room data is read through. It is chosen per call:
// a policy reload switches it for the next command.
func (d *Daemon) source() provider.Rooms {
	if d.appMode() {
		return d.app
	}
	return provider.Builtin{Store: d.store}
}

// newProvider builds the provider server and the install queue.
func (d *Daemon) newProvider() {
	d.prov = provider.New(provider.Config{
		Version:     d.cfg.Version,
		MaxInFlight: d.cfg.ProviderInFlight,
		Projects: func() []string {
			var ids []string
			for _, pp := range d.policy.Load().Summary() {
				ids = append(ids, pp.Project)
			}
			return ids
		},
		Selected: d.appMode,
		OnRooms:  d.providerRooms,
		OnChange: d.providerChanged,
		Events:   d.pub,
		PeerOf: func(r *http.Request) (provider.Peer, bool) {
			p, ok := localapi.PeerFrom(r.Context())
			return provider.Peer{PID: p.PID, Exe: p.Exe}, ok
		},
		Logger: d.log,
	})
	d.app = d.prov.App()
	d.installer = provider.NewInstaller(d.store, d.prov, d.pub, d.log)
	d.installer.Installed = d.installedBuild
}

// installedBuild tells an app with the build_state capability, once it
// installed an approved app, roomrelay's record of the smoke-run of that
// content: the smoke-run after an approval usually ends after the install,
// and recordBuild tells the app then, but when the app was closed at
// approval the record came first and the app could not be told.
func (d *Daemon) installedBuild(ctx context.Context, j rooms.InstallJob) {
	b, ok, err := d.store.AppBuildOf(ctx, j.InstanceID)
	if err != nil || !ok || b.RoomID != j.RoomID || b.ContentHash != j.ContentHash {
		return
	}
	if err := d.app.SetBuildState(ctx, j.Project, j.RoomID, j.InstanceID, b.ContentHash, b.Build); err != nil {
		d.log.Info("the desktop app was not told the build state after its install; roomrelay's record stands", "instance_id", j.InstanceID, "err", err)
	}
}

// providerRooms persists the app's directory (so proposals are checked
// while it is closed) and tells the hub of the rooms the policy serves.
func (d *Daemon) providerRooms(list []provider.Room) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs := make([]rooms.ProviderRoom, len(list))
	for i, r := range list {
		rs[i] = rooms.ProviderRoom{ID: r.ID, Project: r.Project, Name: r.Name}
	}
	skipped, err := d.store.SyncProviderRooms(ctx, rs)
	if err != nil {
		d.log.Warn("the desktop app's directory was not stored", "err", err)
		return
	}
	if len(skipped) > 0 {
		d.log.Warn("the desktop app lists rooms whose ids are builtin rooms of this device; they are not served", "rooms", skipped)
	}
	d.announceRooms(ctx)
}

// providerChanged kicks the install queue when an app says hello.
func (d *Daemon) providerChanged(connected bool, _ provider.AppInfo) {
	if connected {
		d.installer.Kick()
	}
	if d.appMode() {
		d.announceProvider()
	}
}

// appNotifies reports whether the connected app shows "needs your
// approval" itself (capability notifications).
func (d *Daemon) appNotifies() bool {
	if !d.appMode() {
		return false
	}
	info, ok := d.prov.Connected()
	return ok && info.Capabilities.Notifications
}

// readRoom is read_room: the provider's summary, with the pending proposals
// roomrelay's own store holds. With the app as provider the count runs
// while the app answers, not after: the app is another process, and the
// query (SQLite parses it each time) added its time to every read's round
// trip (BenchmarkProviderReadRoom, #28 §4).
func (d *Daemon) readRoom(ctx context.Context, projectID, roomID string) (rooms.RoomSummary, error) {
	if !d.appMode() {
		return provider.Builtin{Store: d.store}.ReadRoom(ctx, projectID, roomID)
	}
	type count struct {
		n   int
		err error
	}
	pending := make(chan count, 1)
	go func() {
		n, err := d.store.PendingProposals(ctx, roomID)
		pending <- count{n, err}
	}()
	r, err := d.app.ReadRoom(ctx, projectID, roomID)
	c := <-pending // joined before returning: the store outlives no caller
	if err != nil {
		return r, err
	}
	r.PendingProposals = c.n
	return r, c.err
}

// readAppStatus is read_room_app_status with the install state of an app an
// approval created. An app the desktop app has not installed (pending or
// refused) is answered from roomrelay's record of the approval, without
// asking the app. An app-provided app's build state is the app's when it
// reports one (capability build_state), else roomrelay's record of its own
// smoke-run of that content.
func (d *Daemon) readAppStatus(ctx context.Context, projectID, roomID, instanceID string) (rooms.AppStatus, error) {
	in, ierr := d.store.InstallOf(ctx, instanceID)
	if !d.appMode() {
		st, err := d.source().ReadRoomAppStatus(ctx, projectID, roomID, instanceID)
		if err == nil && ierr == nil {
			st.InstallState = in.State
		}
		return st, err
	}
	if ierr == nil && in.State != rooms.InstallInstalled {
		p, err := d.store.GetProposal(ctx, in.ProposalID)
		if err != nil || p.Project != projectID || p.RoomID != roomID {
			return rooms.AppStatus{}, relay.Errorf(relay.CodeNotFound, "no app %q in local room %q", instanceID, roomID)
		}
		return rooms.AppStatus{RoomID: roomID, InstanceID: instanceID, Name: p.Name, Source: p.Kind,
			Launcher:     rooms.Launcher{State: rooms.LauncherNotInstalled},
			Review:       rooms.Review{State: rooms.ReviewApproved, ReviewedAt: p.DecidedAt},
			Build:        d.recordedBuild(ctx, roomID, instanceID, p.ContentHash),
			InstallState: in.State}, nil
	}
	st, hash, err := d.app.AppStatus(ctx, projectID, roomID, instanceID)
	if err != nil {
		return rooms.AppStatus{}, err
	}
	if st.Build.State == rooms.BuildNone {
		st.Build = d.recordedBuild(ctx, roomID, instanceID, hash)
	}
	if ierr == nil {
		st.InstallState = in.State
	}
	return st, nil
}

// recordedBuild is roomrelay's record of its last smoke-run of an app the
// desktop app provides, if it ran the content the app reports (any, when
// the app reports no hash); else state none.
func (d *Daemon) recordedBuild(ctx context.Context, roomID, instanceID, contentHash string) rooms.Build {
	b, ok, err := d.store.AppBuildOf(ctx, instanceID)
	if err != nil {
		d.log.Warn("reading the build record failed", "instance_id", instanceID, "err", err)
	}
	if !ok || b.RoomID != roomID || (contentHash != "" && b.ContentHash != contentHash) {
		return rooms.Build{State: rooms.BuildNone}
	}
	return b.Build
}

// roomName is a room's name for the owner's eyes, or "" if unknown.
func (d *Daemon) roomName(ctx context.Context, projectID, roomID string) string {
	if d.appMode() {
		rs, err := d.store.ListProviderRooms(ctx, projectID)
		if err == nil {
			for _, r := range rs {
				if r.ID == roomID {
					return r.Name
				}
			}
		}
		return ""
	}
	if r, err := d.store.ReadRoom(ctx, projectID, roomID); err == nil {
		return r.Name
	}
	return ""
}

// providerState is the room provider as the hub is told of it.
func (d *Daemon) providerState() *relay.ProviderState {
	if !d.appMode() {
		return &relay.ProviderState{Kind: allowlist.ProviderBuiltin, Connected: true}
	}
	_, ok := d.prov.Connected()
	return &relay.ProviderState{Kind: allowlist.ProviderApp, Connected: ok}
}

// announceProvider tells the hub the provider's state (the app connected or
// went away, or the owner switched provider), so list_local_rooms can say
// "online, app closed". The agent stays the authority on app_not_running.
func (d *Daemon) announceProvider() {
	if d.agent == nil {
		return
	}
	data, _ := json.Marshal(d.providerState())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.agent.SendEvent(ctx, relay.Event{Event: relay.EventProviderChanged, Time: time.Now().UTC(), Data: data}); err != nil {
		d.log.Warn("provider_changed event not queued", "err", err)
	}
}
