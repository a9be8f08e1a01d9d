package review

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/internal/testutil/webdriver"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/sandbox"
)

// trojan is a "Trojan Source" line: bidi controls make the comment read
// as if the check were code.
const trojan = "export const role = \"user\u202e \u2066// admin only\u2069 \u2066\";\n"

// TestReviewPageInBrowser: the owner opens the printed URL in Chromium and
// sees the pending list with who proposed what; on a proposal, every file
// in full, numbered and highlighted, without scrolling inside a box, a
// banner about hidden characters above the files, who proposed it and
// when, and the sandbox check before the buttons; the page runs no script
// (the CSP refuses it). Clicking "Approve and create" puts the app in the
// launcher; another proposal, clean (no banner), is declined. Screenshots
// of the list, the proposal and the approved page go to
// ROOMRELAY_ARTIFACTS (dist/artifacts/browser in CI).
func TestReviewPageInBrowser(t *testing.T) {
	chromium, driver := webdriver.Look(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := rooms.Open(ctx, filepath.Join(t.TempDir(), "rooms.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateProject(ctx, "proj-a", "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRoom(ctx, rooms.NewRoom{ID: "room-1", ProjectID: "proj-a", Name: "Standup"}); err != nil {
		t.Fatal(err)
	}
	files, err := sandbox.ReadSnippetDir(filepath.Join("..", "..", "examples", "standup-timer"))
	if err != nil {
		t.Fatal(err)
	}
	// A file that tries to end the <pre> and run script must stay text;
	// its bidi controls must raise the banner.
	files["src/notes.ts"] = "// </pre><script>document.title='pwned'</script>\nexport const notes = 1;\n" + trojan
	const by = `MCP client token "standup-bot" (ct_3f9a)`
	propose := func(name string, files map[string]string) rooms.Proposal {
		p, _, err := s.CreateProposal(ctx, rooms.NewProposal{ProjectID: "proj-a", RoomID: "room-1", Kind: rooms.SourceSnippet,
			Name: name, Files: files, IdempotencyKey: relay.SnippetKey("room-1", name, files), ProposedBy: by})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	timer := propose("Standup timer", files)
	other := propose("Other", map[string]string{"src/App.tsx": "export default function App() { return null }\n"})

	checker := browserChecker(t)
	var opts []Option
	if checker != nil {
		opts = append(opts, WithChecker(checker, 0))
	}
	srv, err := Listen(s, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	wd := webdriver.Start(t, chromium, driver)
	wd.Navigate(srv.URL())
	var url string
	_ = json.Unmarshal(wd.Call(http.MethodGet, wd.S("/url"), nil), &url)
	if strings.Contains(url, "token=") {
		t.Errorf("the token stayed in the address bar: %s", url)
	}
	if links := wd.FindAll("a.proposal-link"); len(links) != 2 {
		t.Fatalf("%d pending proposals listed, want 2", len(links))
	}
	if cells := wd.FindAll("td.proposed-by"); len(cells) != 2 || wd.Text(cells[0]) != by {
		t.Errorf("list: proposed-by cells %d", len(cells))
	}
	wd.ScreenshotPage(filepath.Join(webdriver.ArtifactDir(t), "review-list.png"))
	wd.Click(wd.Find(fmt.Sprintf(`a[href="/p/%s"]`, timer.ID)))

	if got := wd.WaitText("#files-heading", "Review all proposed files (3)"); got != "Review all proposed files (3)" {
		t.Errorf("heading %q", got)
	}
	if got := wd.Text(wd.Find("p.notice")); got != TextApproval {
		t.Errorf("notice %q", got)
	}
	if a, d := wd.Text(wd.Find("#approve")), wd.Text(wd.Find("#decline")); a != TextApprove || d != TextDecline {
		t.Errorf("buttons %q, %q", a, d)
	}
	if got, want := wd.Text(wd.Find("#proposed-by")), by; got != want {
		t.Errorf("proposed by %q, want %q", got, want)
	}
	if got, want := wd.Text(wd.Find("#arrived")), timer.CreatedAt.UTC().Format(TimeFormat); got != want {
		t.Errorf("arrived %q, want %q", got, want)
	}
	sections := wd.FindAll("section.file")
	if len(sections) != len(files) {
		t.Fatalf("%d file boxes, want %d", len(sections), len(files))
	}
	// Every file in full: the code text of each box is the file byte for
	// byte (hidden characters as their markers), one numbered line per
	// line, highlighted by the style sheet, and no box scrolls vertically:
	// the page shows the whole file.
	var shown []struct {
		Path, Size, Text    string
		Numbers             []string
		NumbersSelectable   bool
		Keywords            int
		KeywordColor        string
		BoxHeight, ContentH float64
		LineHeight          float64
		HiddenMarks         int
		ScrollsInside       bool
	}
	raw := wd.Script(`return Array.from(document.querySelectorAll("section.file")).map(s => {
		const pre = s.querySelector("pre");
		const kw = pre.querySelector("span.kr, span.kd, span.k");
		const ln = pre.querySelector(".ln");
		const line = pre.querySelector(".line");
		return {Path: s.querySelector(".file-path").textContent, Size: s.querySelector(".file-size").textContent,
			Text: Array.from(pre.querySelectorAll(".cl")).map(c => c.textContent).join(""),
			Numbers: Array.from(pre.querySelectorAll(".ln")).map(n => n.textContent),
			NumbersSelectable: ln ? getComputedStyle(ln).userSelect !== "none" : false,
			Keywords: pre.querySelectorAll("span.kr, span.kd, span.k").length,
			KeywordColor: kw ? getComputedStyle(kw).color : "",
			BoxHeight: pre.clientHeight, ContentH: pre.scrollHeight,
			LineHeight: line ? line.getBoundingClientRect().height : 0,
			HiddenMarks: pre.querySelectorAll(".hidden-char").length,
			ScrollsInside: pre.scrollHeight > pre.clientHeight + 1};
	})`)
	if err := json.Unmarshal(raw, &shown); err != nil {
		t.Fatal(err)
	}
	for _, f := range shown {
		want, ok := files[f.Path]
		if !ok || f.Text != Printable(want) {
			t.Errorf("%s: shown text differs from the file (%d vs %d bytes)", f.Path, len(f.Text), len(want))
		}
		if !strings.HasPrefix(f.Size, strconv.Itoa(len(want))+" bytes, "+strconv.Itoa(LineCount(want))+" line") {
			t.Errorf("%s: size %q, want %d bytes", f.Path, f.Size, len(want))
		}
		if n := LineCount(want); len(f.Numbers) != n || f.Numbers[0] != "1" || f.Numbers[n-1] != strconv.Itoa(n) {
			t.Errorf("%s: line numbers %v, want 1..%d", f.Path, f.Numbers, n)
		}
		if f.NumbersSelectable {
			t.Errorf("%s: line numbers would be copied with the code", f.Path)
		}
		if f.ScrollsInside || f.BoxHeight < float64(LineCount(want))*f.LineHeight {
			t.Errorf("%s: box %.0f px for %.0f px of content: the file does not show in full", f.Path, f.BoxHeight, f.ContentH)
		}
		switch f.Path {
		case "src/App.tsx", "src/notes.ts":
			// #cf222e from highlight.css: the sheet loaded under the CSP.
			if f.Keywords == 0 || f.KeywordColor != "rgb(207, 34, 46)" {
				t.Errorf("%s: %d keywords highlighted, colour %q", f.Path, f.Keywords, f.KeywordColor)
			}
		}
		if wantMarks := strings.Count(Printable(want), "⟨U+"); f.HiddenMarks != wantMarks {
			t.Errorf("%s: %d hidden-character marks, want %d", f.Path, f.HiddenMarks, wantMarks)
		}
	}
	if n := len(shown); n == 0 || shown[0].Path != "src/App.tsx" || len(shown[0].Numbers) != 62 {
		t.Errorf("the 62-line standup timer is not the first box in full")
	}
	// The banner is above the files and names the file with bidi controls.
	banner := wd.Text(wd.Find("#hidden-banner"))
	if !strings.Contains(banner, "Hidden characters") || !strings.Contains(banner, "src/notes.ts: 4 bidi controls (U+202E, U+2066, U+2069)") ||
		strings.Contains(banner, "src/App.tsx") {
		t.Errorf("banner %q", banner)
	}
	// The sandbox check comes before the buttons.
	var order struct{ BannerFirst, CheckFirst bool }
	_ = json.Unmarshal(wd.Script(`const f = document.getElementById("files-heading"), c = document.getElementById("sandbox-check"), a = document.getElementById("approve");
		return {BannerFirst: !!(document.getElementById("hidden-banner").compareDocumentPosition(f) & Node.DOCUMENT_POSITION_FOLLOWING),
			CheckFirst: !!(c && (c.compareDocumentPosition(a) & Node.DOCUMENT_POSITION_FOLLOWING))}`), &order)
	if !order.BannerFirst || !order.CheckFirst {
		t.Errorf("order: banner before files %v, check before buttons %v", order.BannerFirst, order.CheckFirst)
	}
	check := wd.Text(wd.Find("#sandbox-check p"))
	wantCheck := "Passed: passes the proposal rules, builds, renders 12 elements (3 buttons), 3 onClick handlers clicked without error"
	if checker == nil {
		wantCheck = "Not checked: this review page was started without the sandbox"
	}
	if check != wantCheck {
		t.Errorf("sandbox check %q, want %q", check, wantCheck)
	}
	var title string
	_ = json.Unmarshal(wd.Script(`return document.title`), &title)
	if strings.Contains(title, "pwned") || len(wd.FindAll("main script")) != 0 {
		t.Fatalf("a proposed file's markup ran: title %q", title)
	}
	// The page's CSP refuses script: a <script> element added to the page
	// does not run, and the browser reports the violation.
	var csp struct {
		Ran       bool
		Violation string
	}
	_ = json.Unmarshal(wd.Script(`let v = "";
		document.addEventListener("securitypolicyviolation", e => { v = e.effectiveDirective; });
		const s = document.createElement("script");
		s.textContent = "window.__ran = true";
		document.body.appendChild(s);
		return new Promise(r => setTimeout(() => r({Ran: window.__ran === true, Violation: v}), 100));`), &csp)
	if csp.Ran || !strings.HasPrefix(csp.Violation, "script-src") {
		t.Errorf("an injected script: ran %v, violation %q", csp.Ran, csp.Violation)
	}
	wd.ScreenshotPage(filepath.Join(webdriver.ArtifactDir(t), "review-proposal-bidi.png"))

	// Checking ran the snippet, approving nothing.
	if d, err := s.GetProposal(ctx, timer.ID); err != nil || d.State != rooms.ProposalPending {
		t.Fatalf("after the check: %s %v", d.State, err)
	}
	wd.Click(wd.Find("#approve"))
	if h := wd.WaitText("h1", "Approved"); h != "Approved" {
		t.Fatalf("after approve: %q: %s", h, wd.Text(wd.Find("main")))
	}
	wd.ScreenshotPage(filepath.Join(webdriver.ArtifactDir(t), "review-approved.png"))
	page, err := s.ListRoomApps(ctx, "proj-a", "room-1", 50, "")
	if err != nil || len(page.Items) != 1 || page.Items[0].Name != "Standup timer" {
		t.Fatalf("launcher after approve: %+v %v", page.Items, err)
	}

	wd.Navigate(strings.SplitN(srv.URL(), "?", 2)[0])
	wd.Click(wd.Find(fmt.Sprintf(`a[href="/p/%s"]`, other.ID)))
	wd.WaitText("#decline", TextDecline)
	if n := len(wd.FindAll("#hidden-banner")) + len(wd.FindAll(".hidden-char")); n != 0 {
		t.Errorf("a clean proposal shows %d hidden-character warnings", n)
	}
	wd.Click(wd.Find("#decline"))
	if h := wd.WaitText("h1", "Declined"); h != "Declined" {
		t.Fatalf("after decline: %q", h)
	}
	d, err := s.GetProposal(ctx, other.ID)
	if err != nil || d.State != rooms.ProposalDeclined {
		t.Fatalf("declined proposal: %s %v", d.State, err)
	}
	page, _ = s.ListRoomApps(ctx, "proj-a", "room-1", 50, "")
	if len(page.Items) != 1 {
		t.Fatalf("launcher after decline has %d apps", len(page.Items))
	}
	wd.Navigate(strings.SplitN(srv.URL(), "?", 2)[0])
	if got := wd.Text(wd.Find("p.empty")); got != "No proposals wait for review." {
		t.Errorf("list after both decisions: %q", got)
	}
}
