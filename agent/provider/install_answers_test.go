package provider

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite testdata/install-answers.json from the install-answers table")

// approvedStore opens a store in dir with the app-provided rooms named and
// one approved snippet proposal per entry of props (a room id each, in
// approval order); it returns the approved proposals.
func approvedStore(t testing.TB, dir string, props ...string) (*rooms.Store, []rooms.Proposal) {
	t.Helper()
	ctx := context.Background()
	st, err := rooms.Open(ctx, filepath.Join(dir, "rooms.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var prs []rooms.ProviderRoom
	seen := map[string]bool{}
	for _, r := range props {
		if !seen[r] {
			seen[r] = true
			prs = append(prs, rooms.ProviderRoom{ID: r, Project: "p1", Name: "Room " + r})
		}
	}
	if _, err := st.SyncProviderRooms(ctx, prs); err != nil {
		t.Fatal(err)
	}
	var out []rooms.Proposal
	for i, r := range props {
		p, _, err := st.CreateProposal(ctx, rooms.NewProposal{ProjectID: "p1", RoomID: r, Kind: rooms.SourceSnippet, Name: "Hi",
			Files:          map[string]string{"src/App.tsx": "export default function App() { return <p>" + string(rune('a'+i)) + "</p> }"},
			IdempotencyKey: "k" + string(rune('a'+i)), Provider: rooms.ProviderApp})
		if err != nil {
			t.Fatal(err)
		}
		approved, err := st.ApproveProposal(ctx, p.ID, p.ContentHash)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, approved)
	}
	return st, out
}

// runInstaller runs inst until the test ends.
func runInstaller(t testing.TB, inst *Installer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inst.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestInstallAnswers: over the real socket, each code of the install-answers
// table does what the table says: a failed one ends the install failed,
// visibly, after one delivery; a retried one (and a code the table does not
// know) leaves it pending and delivers it again.
func TestInstallAnswers(t *testing.T) {
	t.Parallel()
	cases := append(InstallAnswers(), InstallAnswer{Code: "no_such_code", Outcome: OutcomeRetried})
	for _, c := range cases {
		t.Run(c.Code, func(t *testing.T) {
			ctx := context.Background()
			st, props := approvedStore(t, t.TempDir(), "r1")
			var ev recorder
			ts := startServer(t, nil)
			inst := NewInstaller(st, ts.Server, &ev, nil)
			inst.MinBackoff, inst.MaxBackoff = time.Millisecond, time.Millisecond
			app := connectApp(t, ts, allCaps, func(*fakeApp, message) string {
				return `"error":{"code":-32000,"message":"no","data":{"code":"` + c.Code + `"}}`
			})
			runInstaller(t, inst)
			if c.Outcome == OutcomeRetried {
				testutil.Eventually(t, "a second delivery", func() bool { return len(app.received(MethodAppsInstall)) >= 2 })
				if in, err := st.InstallOf(ctx, props[0].InstanceID); err != nil || in.State != rooms.InstallPending {
					t.Fatalf("install %+v %v, want pending", in, err)
				}
				return
			}
			testutil.Eventually(t, "the install failed", func() bool {
				in, err := st.InstallOf(ctx, props[0].InstanceID)
				return err == nil && in.State == rooms.InstallFailed
			})
			in, _ := st.InstallOf(ctx, props[0].InstanceID)
			if want := c.Code + ": the desktop app refused the install (" + c.Meaning + ")"; in.Error != want {
				t.Fatalf("install error %q, want %q", in.Error, want)
			}
			testutil.Eventually(t, "an install_changed event", func() bool { return len(ev.got()) == 1 })
			if e := ev.got()[0]; e.typ != events.TypeInstallChanged || e.data.(events.InstallChanged).InstallState != rooms.InstallFailed {
				t.Fatalf("event %+v", e)
			}
			inst.Kick()
			inst.Kick()
			if n := len(app.received(MethodAppsInstall)); n != 1 {
				t.Fatalf("%d deliveries of a refused install, want 1", n)
			}
		})
	}
}

// TestInstallAnswersDocumented: the table's copies say what it says:
// testdata/install-answers.json byte for byte (clients/ts checks its
// constants against that file), and a row per code in
// docs/provider-protocol.md and in clients/ts/README.md.
func TestInstallAnswersDocumented(t *testing.T) {
	t.Parallel()
	const golden = "testdata/install-answers.json"
	want := installAnswersJSON()
	if *update {
		if err := os.WriteFile(golden, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(golden)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s is not the table (%v): run go test ./agent/provider -run TestInstallAnswersDocumented -update", golden, err)
	}
	for _, doc := range []string{"../../docs/provider-protocol.md", "../../clients/ts/README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, a := range installAnswers {
			row := "| `" + a.Code + "` | " + string(a.Outcome) + " | " + a.Meaning + " |"
			if !strings.Contains(text, row) {
				t.Errorf("%s has no row %s", doc, row)
			}
		}
	}
}
