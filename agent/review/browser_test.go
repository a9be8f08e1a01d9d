package review

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/sandbox"
)

// The browser test drives headless Chromium through chromedriver's W3C
// WebDriver HTTP API. It runs when ROOMRELAY_BROWSER=1 (CI sets it through
// .ci/browser-tests), and then fails if the browser is missing.
const browserEnv = "ROOMRELAY_BROWSER"

func lookBrowser(t *testing.T) (chromium, driver string) {
	t.Helper()
	if os.Getenv(browserEnv) != "1" {
		t.Skipf("set %s=1 to run the review page in headless Chromium (needs Debian's chromium and chromium-driver)", browserEnv)
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			chromium = p
			break
		}
	}
	driver, err := exec.LookPath("chromedriver")
	if chromium == "" || err != nil {
		t.Fatalf("%s=1 but chromium (%q) or chromedriver (%v) is missing: apt-get install -y chromium chromium-driver", browserEnv, chromium, err)
	}
	return chromium, driver
}

// webdriver is a minimal W3C WebDriver client.
type webdriver struct {
	t       *testing.T
	base    string
	session string
}

const elementKey = "element-6066-11e4-a52e-4f735466cecf"

func (wd *webdriver) call(method, path string, in any) json.RawMessage {
	wd.t.Helper()
	v, status, raw := wd.try(method, path, in)
	if status != http.StatusOK {
		wd.t.Fatalf("webdriver %s %s: %d %.500s", method, path, status, raw)
	}
	return v
}

// try is call without failing the test: the value, the HTTP status and the
// raw body.
func (wd *webdriver) try(method, path string, in any) (json.RawMessage, int, []byte) {
	wd.t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, wd.base+path, body)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		wd.t.Fatalf("webdriver %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, resp.StatusCode, raw
	}
	return out.Value, resp.StatusCode, raw
}

// waitText waits until the element css shows want: after a click that
// submits a form, the old page's element can still be found (and then go
// stale) until the browser has navigated.
func (wd *webdriver) waitText(css, want string) string {
	wd.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		raw, status, _ := wd.try(http.MethodPost, wd.s("/element"), map[string]string{"using": "css selector", "value": css})
		var v map[string]string
		if status == http.StatusOK && json.Unmarshal(raw, &v) == nil && v[elementKey] != "" {
			if tv, st, _ := wd.try(http.MethodGet, wd.s("/element/"+v[elementKey]+"/text"), nil); st == http.StatusOK {
				_ = json.Unmarshal(tv, &got)
				if got == want {
					return got
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return got
}

func (wd *webdriver) s(path string) string { return "/session/" + wd.session + path }

func (wd *webdriver) navigate(url string) {
	wd.call(http.MethodPost, wd.s("/url"), map[string]string{"url": url})
}

func (wd *webdriver) find(css string) string {
	wd.t.Helper()
	var v map[string]string
	raw := wd.call(http.MethodPost, wd.s("/element"), map[string]string{"using": "css selector", "value": css})
	if err := json.Unmarshal(raw, &v); err != nil || v[elementKey] == "" {
		wd.t.Fatalf("find %s: %s (%v)", css, raw, err)
	}
	return v[elementKey]
}

func (wd *webdriver) findAll(css string) []string {
	var vs []map[string]string
	_ = json.Unmarshal(wd.call(http.MethodPost, wd.s("/elements"), map[string]string{"using": "css selector", "value": css}), &vs)
	ids := make([]string, len(vs))
	for i, v := range vs {
		ids[i] = v[elementKey]
	}
	return ids
}

// text is what the user sees of an element (rendered text).
func (wd *webdriver) text(el string) string {
	var s string
	_ = json.Unmarshal(wd.call(http.MethodGet, wd.s("/element/"+el+"/text"), nil), &s)
	return s
}

// script runs JavaScript through the driver (outside the page's CSP).
func (wd *webdriver) script(src string, args ...any) json.RawMessage {
	if args == nil {
		args = []any{}
	}
	return wd.call(http.MethodPost, wd.s("/execute/sync"), map[string]any{"script": src, "args": args})
}

func (wd *webdriver) click(el string) {
	wd.call(http.MethodPost, wd.s("/element/"+el+"/click"), map[string]any{})
}

func (wd *webdriver) screenshot(path string) {
	wd.t.Helper()
	var b64 string
	_ = json.Unmarshal(wd.call(http.MethodGet, wd.s("/screenshot"), nil), &b64)
	png, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(png) < 8 || string(png[1:4]) != "PNG" {
		wd.t.Fatalf("screenshot is not a PNG (%v)", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		wd.t.Fatal(err)
	}
	wd.t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startDriver runs chromedriver and opens a headless Chromium session.
func startDriver(t *testing.T, chromium, driver string) *webdriver {
	t.Helper()
	port := freePort(t)
	cmd := exec.Command(driver, "--port="+strconv.Itoa(port))
	var logb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logb, &logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("chromedriver output:\n%s", logb.String())
		}
	})
	wd := &webdriver{t: t, base: "http://127.0.0.1:" + strconv.Itoa(port)}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(wd.base + "/status")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromedriver did not start: %v\n%s", err, logb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromium, "args": []string{
			"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--disable-dev-shm-usage", "--window-size=1200,1900", "--user-data-dir=" + t.TempDir(),
		}},
	}}}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(wd.call(http.MethodPost, "/session", caps), &sess); err != nil || sess.SessionID == "" {
		t.Fatalf("new session: %v", err)
	}
	wd.session = sess.SessionID
	t.Cleanup(func() { wd.call(http.MethodDelete, wd.s(""), nil) })
	return wd
}

func artifactDir(t *testing.T) string {
	if d := os.Getenv("ROOMRELAY_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// screenshotPage saves the whole page, not only the window: the window is
// grown to the document's height for the shot, then put back.
func (wd *webdriver) screenshotPage(path string) {
	wd.t.Helper()
	var h int
	_ = json.Unmarshal(wd.script(`return Math.ceil(document.documentElement.scrollHeight)`), &h)
	var rect struct{ Width, Height int }
	_ = json.Unmarshal(wd.call(http.MethodGet, wd.s("/window/rect"), nil), &rect)
	if h > rect.Height {
		wd.call(http.MethodPost, wd.s("/window/rect"), map[string]int{"width": rect.Width, "height": min(h+120, 12000)})
		defer wd.call(http.MethodPost, wd.s("/window/rect"), map[string]int{"width": rect.Width, "height": rect.Height})
	}
	wd.screenshot(path)
}

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
	chromium, driver := lookBrowser(t)
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

	wd := startDriver(t, chromium, driver)
	wd.navigate(srv.URL())
	var url string
	_ = json.Unmarshal(wd.call(http.MethodGet, wd.s("/url"), nil), &url)
	if strings.Contains(url, "token=") {
		t.Errorf("the token stayed in the address bar: %s", url)
	}
	if links := wd.findAll("a.proposal-link"); len(links) != 2 {
		t.Fatalf("%d pending proposals listed, want 2", len(links))
	}
	if cells := wd.findAll("td.proposed-by"); len(cells) != 2 || wd.text(cells[0]) != by {
		t.Errorf("list: proposed-by cells %d", len(cells))
	}
	wd.screenshotPage(filepath.Join(artifactDir(t), "review-list.png"))
	wd.click(wd.find(fmt.Sprintf(`a[href="/p/%s"]`, timer.ID)))

	if got := wd.waitText("#files-heading", "Review all proposed files (3)"); got != "Review all proposed files (3)" {
		t.Errorf("heading %q", got)
	}
	if got := wd.text(wd.find("p.notice")); got != TextApproval {
		t.Errorf("notice %q", got)
	}
	if a, d := wd.text(wd.find("#approve")), wd.text(wd.find("#decline")); a != TextApprove || d != TextDecline {
		t.Errorf("buttons %q, %q", a, d)
	}
	if got, want := wd.text(wd.find("#proposed-by")), by; got != want {
		t.Errorf("proposed by %q, want %q", got, want)
	}
	if got, want := wd.text(wd.find("#arrived")), timer.CreatedAt.UTC().Format(TimeFormat); got != want {
		t.Errorf("arrived %q, want %q", got, want)
	}
	sections := wd.findAll("section.file")
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
	raw := wd.script(`return Array.from(document.querySelectorAll("section.file")).map(s => {
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
	banner := wd.text(wd.find("#hidden-banner"))
	if !strings.Contains(banner, "Hidden characters") || !strings.Contains(banner, "src/notes.ts: 4 bidi controls (U+202E, U+2066, U+2069)") ||
		strings.Contains(banner, "src/App.tsx") {
		t.Errorf("banner %q", banner)
	}
	// The sandbox check comes before the buttons.
	var order struct{ BannerFirst, CheckFirst bool }
	_ = json.Unmarshal(wd.script(`const f = document.getElementById("files-heading"), c = document.getElementById("sandbox-check"), a = document.getElementById("approve");
		return {BannerFirst: !!(document.getElementById("hidden-banner").compareDocumentPosition(f) & Node.DOCUMENT_POSITION_FOLLOWING),
			CheckFirst: !!(c && (c.compareDocumentPosition(a) & Node.DOCUMENT_POSITION_FOLLOWING))}`), &order)
	if !order.BannerFirst || !order.CheckFirst {
		t.Errorf("order: banner before files %v, check before buttons %v", order.BannerFirst, order.CheckFirst)
	}
	check := wd.text(wd.find("#sandbox-check p"))
	wantCheck := "Passed: passes the proposal rules, builds, renders 12 elements (3 buttons), 3 onClick handlers clicked without error"
	if checker == nil {
		wantCheck = "Not checked: this review page was started without the sandbox"
	}
	if check != wantCheck {
		t.Errorf("sandbox check %q, want %q", check, wantCheck)
	}
	var title string
	_ = json.Unmarshal(wd.script(`return document.title`), &title)
	if strings.Contains(title, "pwned") || len(wd.findAll("main script")) != 0 {
		t.Fatalf("a proposed file's markup ran: title %q", title)
	}
	// The page's CSP refuses script: a <script> element added to the page
	// does not run, and the browser reports the violation.
	var csp struct {
		Ran       bool
		Violation string
	}
	_ = json.Unmarshal(wd.script(`let v = "";
		document.addEventListener("securitypolicyviolation", e => { v = e.effectiveDirective; });
		const s = document.createElement("script");
		s.textContent = "window.__ran = true";
		document.body.appendChild(s);
		return new Promise(r => setTimeout(() => r({Ran: window.__ran === true, Violation: v}), 100));`), &csp)
	if csp.Ran || !strings.HasPrefix(csp.Violation, "script-src") {
		t.Errorf("an injected script: ran %v, violation %q", csp.Ran, csp.Violation)
	}
	wd.screenshotPage(filepath.Join(artifactDir(t), "review-proposal-bidi.png"))

	// Checking ran the snippet, approving nothing.
	if d, err := s.GetProposal(ctx, timer.ID); err != nil || d.State != rooms.ProposalPending {
		t.Fatalf("after the check: %s %v", d.State, err)
	}
	wd.click(wd.find("#approve"))
	if h := wd.waitText("h1", "Approved"); h != "Approved" {
		t.Fatalf("after approve: %q: %s", h, wd.text(wd.find("main")))
	}
	wd.screenshotPage(filepath.Join(artifactDir(t), "review-approved.png"))
	page, err := s.ListRoomApps(ctx, "proj-a", "room-1", 50, "")
	if err != nil || len(page.Items) != 1 || page.Items[0].Name != "Standup timer" {
		t.Fatalf("launcher after approve: %+v %v", page.Items, err)
	}

	wd.navigate(strings.SplitN(srv.URL(), "?", 2)[0])
	wd.click(wd.find(fmt.Sprintf(`a[href="/p/%s"]`, other.ID)))
	wd.waitText("#decline", TextDecline)
	if n := len(wd.findAll("#hidden-banner")) + len(wd.findAll(".hidden-char")); n != 0 {
		t.Errorf("a clean proposal shows %d hidden-character warnings", n)
	}
	wd.click(wd.find("#decline"))
	if h := wd.waitText("h1", "Declined"); h != "Declined" {
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
	wd.navigate(strings.SplitN(srv.URL(), "?", 2)[0])
	if got := wd.text(wd.find("p.empty")); got != "No proposals wait for review." {
		t.Errorf("list after both decisions: %q", got)
	}
}
