package rooms

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
)

const marker = "LEAK-MARKER-7f3a"

// TestReadsNeverLeak fills everything an app keeps on the device (files,
// config, logs, secrets, SDK storage) and a pending proposal's files with a
// marker, and checks that no result of the three reads contains it.
func TestReadsNeverLeak(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	room := setupRoom(t, s, "p1")
	var ids []string
	for i, src := range []Source{SourceSnippet, SourceRepo, SourceSnippet} {
		na := NewApp{ProjectID: "p1", RoomID: room, Name: "app" + string(rune('0'+i)), Source: src,
			Config: json.RawMessage(`{"token":"` + marker + `-config"}`)}
		if src == SourceSnippet {
			na.Files = map[string]string{
				"src/App.tsx":    "// " + marker + "-file\nexport default () => null",
				"src/styles.css": "/* " + marker + "-css */",
			}
		} else {
			na.RepositoryID, na.VersionID = "repo_1", "v1"
		}
		id, err := s.AddApp(ctx, na)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		for _, err := range []error{
			s.SetAppStorage(ctx, id, "notes", []byte(marker+"-storage")),
			s.SetAppStorage(ctx, id, marker+"-key", []byte("v")),
			s.SetAppSecret(ctx, id, "api_key", marker+"-secret"),
			s.AppendAppLog(ctx, id, "info", "user typed "+marker+"-log"),
			s.SetBuildState(ctx, id, Build{State: BuildOK, Phase: "effects", Summary: "rendered 3 elements"}),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// A pending proposal and an approved one: their files hold the marker too.
	for i, name := range []string{"pending", "approved"} {
		files := map[string]string{"src/App.tsx": "// " + marker + "-proposal-" + name}
		p, _, err := s.CreateProposal(ctx, NewProposal{ProjectID: "p1", RoomID: room, Kind: SourceSnippet,
			Name: name, Files: files, IdempotencyKey: "snip-leaktest-" + string(rune('a'+i))})
		if err != nil {
			t.Fatal(err)
		}
		if name == "approved" {
			ap, err := s.ApproveProposal(ctx, p.ID, p.ContentHash)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ap.InstanceID)
		}
	}

	// The marker really is in the database, so the test can fail.
	files, err := s.AppFiles(ctx, "p1", room, ids[0])
	if err != nil || !strings.Contains(files["src/App.tsx"], marker) {
		t.Fatalf("AppFiles = %v, %v: the marker should be stored", files, err)
	}

	var results []any
	r, err := s.ReadRoom(ctx, "p1", room)
	if err != nil {
		t.Fatal(err)
	}
	results = append(results, r)
	for _, limit := range []int{1, 2, 50} {
		cursor := ""
		for {
			page, err := s.ListRoomApps(ctx, "p1", room, limit, cursor)
			if err != nil {
				t.Fatal(err)
			}
			results = append(results, page)
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
	}
	for _, id := range ids {
		st, err := s.ReadRoomAppStatus(ctx, "p1", room, id)
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, st)
	}
	rooms, err := s.ListRooms(ctx, "p1")
	if err != nil {
		t.Fatal(err)
	}
	results = append(results, rooms)
	for _, res := range results {
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), marker) {
			t.Errorf("%T leaks the marker: %s", res, b)
		}
	}
}

// TestReadResultFields pins the JSON fields of every read result: adding a
// field to a result type is a deliberate decision that changes this list.
func TestReadResultFields(t *testing.T) {
	t.Parallel()
	want := map[string][]string{
		"RoomSummary": {"app_count", "id", "kind", "name", "pending_proposals", "project"},
		"AppPage":     {"items", "next_cursor"},
		"AppItem":     {"instance_id", "launcher", "name", "source"},
		"Launcher":    {"position", "state"},
		"AppStatus":   {"build", "install_state", "instance_id", "launcher", "name", "review", "room_id", "source"},
		"Review":      {"reviewed_at", "state"},
		"Build":       {"checked_at", "phase", "state", "summary"},
	}
	for _, v := range []any{RoomSummary{}, AppPage{}, AppItem{}, Launcher{}, AppStatus{}, Review{}, Build{}} {
		typ := reflect.TypeOf(v)
		var got []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				t.Errorf("%s.%s has no json name: every result field must be named explicitly", typ.Name(), f.Name)
				continue
			}
			got = append(got, name)
		}
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want[typ.Name()], ",") {
			t.Errorf("%s fields = %v, want %v", typ.Name(), got, want[typ.Name()])
		}
	}
}
