package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"time"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
)

// App is the desktop app as the room provider: each method is one request to
// the connected app, its answer decoded into roomrelay's own result structs.
type App struct{ s *Server }

// App returns the provider that forwards to the connected app.
func (s *Server) App() *App { return &App{s: s} }

var hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// invalid is the error of an answer that does not have the documented shape.
func invalid(method string, why string, args ...any) *relay.Error {
	return relay.Errorf(relay.CodeInternal, "the desktop app gave an invalid answer to %s (%s)", method, fmt.Sprintf(why, args...))
}

// ask calls method and maps the outcome: the app's error answers become
// roomrelay's own texts (notFound for not_found); the app's message is
// logged, never returned.
func (a *App) ask(ctx context.Context, method string, params request, notFound func() error, out any) error {
	raw, err := a.s.call(ctx, method, params)
	if err != nil {
		if e, ok := asRPC(err); ok {
			a.s.log.Info("the desktop app answered with an error", "method", method, "code", e.Code,
				"data_code", string(e.relayCode()), "message", relay.CleanLine(e.Message, maxAppMessageLog))
			switch {
			case e.relayCode() == relay.CodeNotFound && notFound != nil:
				return notFound()
			case e.relayCode() == relay.CodeInvalidArgs:
				return relay.Errorf(relay.CodeInvalidArgs, "the desktop app refused the arguments of %s", method)
			case e.Code == rpcMethodNotFound:
				return errMethodMissing{method}
			default:
				return relay.Errorf(relay.CodeInternal, "the desktop app failed %s", method)
			}
		}
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		a.s.log.Warn("the desktop app's answer does not decode", "method", method, "err", err)
		return invalid(method, "not the documented shape")
	}
	return nil
}

// errMethodMissing: the app answered -32601 for an optional method.
type errMethodMissing struct{ method string }

func (e errMethodMissing) Error() string {
	return fmt.Sprintf("the desktop app does not implement %s", e.method)
}

func appNotFound(instanceID, roomID string) func() error {
	return func() error {
		return relay.Errorf(relay.CodeNotFound, "no app %q in local room %q", instanceID, roomID)
	}
}

func roomNotFound(roomID string) func() error {
	return func() error { return relay.RoomNotFound(roomID) }
}

// ReadRoom asks rooms.read. PendingProposals is left 0: roomrelay's store
// counts them.
func (a *App) ReadRoom(ctx context.Context, projectID, roomID string) (rooms.RoomSummary, error) {
	var r roomsReadResult
	if err := a.ask(ctx, MethodRoomsRead, &roomRef{callParams{Project: projectID}, roomID}, roomNotFound(roomID), &r); err != nil {
		return rooms.RoomSummary{}, err
	}
	if r.ID != roomID {
		return rooms.RoomSummary{}, invalid(MethodRoomsRead, "id is not the room asked for")
	}
	if r.AppCount < 0 || r.AppCount > maxAppCount {
		return rooms.RoomSummary{}, invalid(MethodRoomsRead, "app_count out of range")
	}
	return rooms.RoomSummary{ID: roomID, Name: relay.CleanLine(r.Name, relay.MaxRoomNameBytes), Project: projectID,
		Kind: "local", AppCount: r.AppCount}, nil
}

// wireLauncher and wireApp are what roomrelay reads of an app entry.
type wireLauncher struct {
	State    string `json:"state"`
	Position int    `json:"position"`
}

type wireApp struct {
	InstanceID string       `json:"instance_id"`
	Name       string       `json:"name"`
	Source     string       `json:"source"`
	Launcher   wireLauncher `json:"launcher"`
}

// check turns a wire entry into roomrelay's AppItem, or says what is wrong.
func (w wireApp) check() (rooms.AppItem, string) {
	if !relay.ValidID(w.InstanceID) {
		return rooms.AppItem{}, "instance_id does not follow the id rule"
	}
	src := rooms.Source(w.Source)
	if src != rooms.SourceSnippet && src != rooms.SourceRepo {
		return rooms.AppItem{}, "source is not snippet or repo"
	}
	if w.Launcher.State != rooms.LauncherActive && w.Launcher.State != rooms.LauncherHidden {
		return rooms.AppItem{}, "launcher.state is not active or hidden"
	}
	return rooms.AppItem{InstanceID: w.InstanceID, Name: relay.CleanLine(w.Name, relay.MaxRoomNameBytes), Source: src,
		Launcher: rooms.Launcher{State: w.Launcher.State, Position: w.Launcher.Position}}, ""
}

// ListRoomApps asks apps.list for one page.
func (a *App) ListRoomApps(ctx context.Context, projectID, roomID string, limit int, cursor string) (rooms.AppPage, error) {
	if limit < rooms.MinListLimit || limit > rooms.MaxListLimit {
		return rooms.AppPage{}, relay.Errorf(relay.CodeInvalidArgs, "limit %d is out of range: use %d to %d", limit, rooms.MinListLimit, rooms.MaxListLimit)
	}
	var r appsListResult
	params := &appsListParams{roomRef{callParams{Project: projectID}, roomID}, limit, cursor}
	if err := a.ask(ctx, MethodAppsList, params, roomNotFound(roomID), &r); err != nil {
		return rooms.AppPage{}, err
	}
	if len(r.Apps) > limit {
		return rooms.AppPage{}, invalid(MethodAppsList, "more apps than the limit")
	}
	if len(r.NextCursor) > maxCursorBytes {
		return rooms.AppPage{}, invalid(MethodAppsList, "next_cursor over %d bytes", maxCursorBytes)
	}
	page := rooms.AppPage{Items: make([]rooms.AppItem, 0, len(r.Apps)), NextCursor: relay.CleanLine(r.NextCursor, maxCursorBytes)}
	for _, w := range r.Apps {
		it, bad := w.check()
		if bad != "" {
			return rooms.AppPage{}, invalid(MethodAppsList, "%s", bad)
		}
		page.Items = append(page.Items, it)
	}
	return page, nil
}

// ReadRoomAppStatus asks apps.status. Build is read only from an app that
// declared build_state; otherwise it is left "none" for roomrelay to fill.
func (a *App) ReadRoomAppStatus(ctx context.Context, projectID, roomID, instanceID string) (rooms.AppStatus, error) {
	st, _, err := a.AppStatus(ctx, projectID, roomID, instanceID)
	return st, err
}

// AppStatus is ReadRoomAppStatus with the content hash the app reported
// ("" when it gave none), for roomrelay to match its own build record
// against; the hash is never part of the cloud's answer.
func (a *App) AppStatus(ctx context.Context, projectID, roomID, instanceID string) (rooms.AppStatus, string, error) {
	var r appsStatusResult
	params := &appRef{roomRef{callParams{Project: projectID}, roomID}, instanceID}
	if err := a.ask(ctx, MethodAppsStatus, params, appNotFound(instanceID, roomID), &r); err != nil {
		return rooms.AppStatus{}, "", err
	}
	if r.InstanceID != instanceID {
		return rooms.AppStatus{}, "", invalid(MethodAppsStatus, "instance_id is not the app asked for")
	}
	it, bad := r.wireApp.check()
	if bad != "" {
		return rooms.AppStatus{}, "", invalid(MethodAppsStatus, "%s", bad)
	}
	if r.Review.State != rooms.ReviewApproved && r.Review.State != rooms.ReviewOwnerAdded {
		return rooms.AppStatus{}, "", invalid(MethodAppsStatus, "review.state is not approved or owner_added")
	}
	if r.ContentHash != "" && !hashRE.MatchString(r.ContentHash) {
		return rooms.AppStatus{}, "", invalid(MethodAppsStatus, "content_hash is not 64 hex digits")
	}
	st := rooms.AppStatus{RoomID: roomID, InstanceID: instanceID, Name: it.Name, Source: it.Source, Launcher: it.Launcher,
		Review: rooms.Review{State: r.Review.State, ReviewedAt: r.Review.ReviewedAt.UTC()}, Build: rooms.Build{State: rooms.BuildNone}}
	if caps, _ := a.caps(); r.Build != nil && caps.BuildState {
		switch r.Build.State {
		case rooms.BuildNone, rooms.BuildOK, rooms.BuildFailed:
		default:
			return rooms.AppStatus{}, "", invalid(MethodAppsStatus, "build.state is not none, ok or failed")
		}
		st.Build = rooms.Build{State: r.Build.State, Phase: relay.CleanLine(r.Build.Phase, maxPhaseBytes),
			CheckedAt: r.Build.CheckedAt.UTC(), Summary: relay.CleanLine(r.Build.Summary, maxSummaryBytes)}
	}
	return st, r.ContentHash, nil
}

// AppFiles asks apps.files, for a smoke-run on the device only. The files
// must pass a proposal's snippet rules and hash to the content_hash given.
func (a *App) AppFiles(ctx context.Context, projectID, roomID, instanceID string) (map[string]string, error) {
	caps, ok := a.caps()
	if !ok {
		return nil, notRunning("no app is connected")
	}
	if !caps.Files {
		return nil, relay.Errorf(relay.CodeSandboxFailed, "the desktop app does not hand out files to smoke-run (no files capability)")
	}
	var r appsFilesResult
	params := &appRef{roomRef{callParams{Project: projectID}, roomID}, instanceID}
	if err := a.ask(ctx, MethodAppsFiles, params, appNotFound(instanceID, roomID), &r); err != nil {
		return nil, err
	}
	if err := relay.ValidateSnippet(r.Files); err != nil {
		return nil, invalid(MethodAppsFiles, "the files break the snippet rules: %v", err)
	}
	if relay.ContentHash(r.Files) != r.ContentHash {
		return nil, invalid(MethodAppsFiles, "the files do not hash to content_hash")
	}
	return r.Files, nil
}

// BuildStateTimeout bounds apps.set_build_state (a sooner deadline of the
// caller's stands).
const BuildStateTimeout = 30 * time.Second

// SetBuildState tells an app with the build_state capability the outcome
// of a smoke-run; an app without it keeps no build state (nothing is sent).
func (a *App) SetBuildState(ctx context.Context, projectID, roomID, instanceID, contentHash string, b rooms.Build) error {
	if caps, _ := a.caps(); !caps.BuildState {
		return nil
	}
	// After an approval's smoke-run the caller's context has no deadline:
	// an app that never answers must not hold a request slot for ever.
	ctx, cancel := context.WithTimeout(ctx, BuildStateTimeout)
	defer cancel()
	params := &setBuildStateParams{appRef: appRef{roomRef{callParams{Project: projectID}, roomID}, instanceID}, ContentHash: contentHash,
		State: b.State, Phase: b.Phase, Summary: b.Summary, CheckedAt: b.CheckedAt.UTC().Format(time.RFC3339Nano)}
	return a.ask(ctx, MethodSetBuildState, params, appNotFound(instanceID, roomID), nil)
}

// Install is one approved proposal to hand to the app.
type Install struct {
	ProposalID, InstanceID, Project, RoomID, Name string
	Kind                                          rooms.Source
	Files                                         map[string]string
	RepositoryID, VersionID                       string
	ContentHash                                   string
	ApprovedAt                                    time.Time
}

// AnswerError is the desktop app's error answer to apps.install, with the
// install-answers table's row for its data.code (Outcome retried for a code
// the table does not list).
type AnswerError struct{ Answer InstallAnswer }

func (e *AnswerError) Error() string {
	return fmt.Sprintf("the desktop app answered apps.install with %q (%s)", e.Answer.Code, e.Answer.Outcome)
}

// Install asks apps.install. An app's error answer is an *AnswerError whose
// Answer.Outcome says whether it is final (installAnswers); any other error
// (no app, no answer by ctx's end, an invalid answer) is worth retrying.
func (a *App) Install(ctx context.Context, in Install) error {
	caps, ok := a.caps()
	if !ok {
		return notRunning("no app is connected")
	}
	if !caps.Install {
		return fmt.Errorf("the desktop app does not install apps (no install capability)")
	}
	params := &appsInstallParams{roomRef: roomRef{callParams{Project: in.Project}, in.RoomID}, ProposalID: in.ProposalID,
		InstanceID: in.InstanceID, Name: in.Name, Kind: string(in.Kind), ContentHash: in.ContentHash,
		ApprovedAt: in.ApprovedAt.UTC().Format(time.RFC3339Nano)}
	if in.Kind == rooms.SourceSnippet {
		params.Files = in.Files
	} else {
		params.RepositoryID, params.VersionID = &in.RepositoryID, &in.VersionID
	}
	raw, err := a.s.call(ctx, MethodAppsInstall, params)
	if e, ok := asRPC(err); ok {
		ans, _ := installOutcome(relay.CleanLine(string(e.relayCode()), 64))
		a.s.log.Info("the desktop app answered apps.install with an error", "proposal", in.ProposalID, "code", e.Code,
			"data_code", relay.CleanLine(ans.Code, 64), "outcome", ans.Outcome, "message", relay.CleanLine(e.Message, maxAppMessageLog))
		return &AnswerError{Answer: ans}
	}
	if err != nil {
		return err
	}
	var r appsInstallResult
	if err := json.Unmarshal(raw, &r); err != nil {
		return invalid(MethodAppsInstall, "not the documented shape")
	}
	if r.InstanceID != in.InstanceID {
		return invalid(MethodAppsInstall, "instance_id is not the one roomrelay assigned")
	}
	return nil
}

// caps are the connected app's capabilities; false when none is connected.
func (a *App) caps() (Capabilities, bool) {
	info, ok := a.s.Connected()
	return info.Capabilities, ok
}
