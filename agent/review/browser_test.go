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

// TestReviewPageInBrowser: the owner opens the printed URL in Chromium, sees
// every file in full, clicks "Approve and create" (the app enters the
// launcher), and declines another proposal.
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
	// A file that tries to end the <pre> and run script must stay text.
	files["src/notes.ts"] = "// </pre><script>document.title='pwned'</script>\nexport const notes = 1;\n"
	propose := func(name string, files map[string]string) rooms.Proposal {
		p, _, err := s.CreateProposal(ctx, rooms.NewProposal{ProjectID: "proj-a", RoomID: "room-1", Kind: rooms.SourceSnippet,
			Name: name, Files: files, IdempotencyKey: relay.SnippetKey("room-1", name, files)})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	timer := propose("Standup timer", files)
	other := propose("Other", map[string]string{"src/App.tsx": "export default function App() { return null }\n"})

	srv, err := Listen(s, nil)
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
	sections := wd.findAll("section.file")
	if len(sections) != len(files) {
		t.Fatalf("%d file boxes, want %d", len(sections), len(files))
	}
	// Every file in full: the DOM text of each box is the file, byte for
	// byte, and each box scrolls on its own.
	var shown []struct {
		Path, Size, Text string
		Scrolls          bool
	}
	raw := wd.script(`return Array.from(document.querySelectorAll("section.file")).map(s => {
		const pre = s.querySelector("pre");
		const st = getComputedStyle(pre);
		return {Path: s.querySelector(".file-path").textContent, Size: s.querySelector(".file-size").textContent,
			Text: pre.textContent, Scrolls: st.overflowY === "auto" && st.maxHeight !== "none"};
	})`)
	if err := json.Unmarshal(raw, &shown); err != nil {
		t.Fatal(err)
	}
	for _, f := range shown {
		want, ok := files[f.Path]
		if !ok || f.Text != want {
			t.Errorf("%s: shown text differs from the file (%d vs %d bytes)", f.Path, len(f.Text), len(want))
		}
		if !strings.HasPrefix(f.Size, strconv.Itoa(len(want))+" bytes") {
			t.Errorf("%s: size %q, want %d bytes", f.Path, f.Size, len(want))
		}
		if !f.Scrolls {
			t.Errorf("%s: not in its own scroll box", f.Path)
		}
	}
	var title string
	_ = json.Unmarshal(wd.script(`return document.title`), &title)
	if strings.Contains(title, "pwned") || len(wd.findAll("main script")) != 0 {
		t.Fatalf("a proposed file's markup ran: title %q", title)
	}
	wd.screenshot(filepath.Join(artifactDir(t), "review-proposal.png"))

	wd.click(wd.find("#approve"))
	if h := wd.waitText("h1", "Approved"); h != "Approved" {
		t.Fatalf("after approve: %q: %s", h, wd.text(wd.find("main")))
	}
	wd.screenshot(filepath.Join(artifactDir(t), "review-approved.png"))
	page, err := s.ListRoomApps(ctx, "proj-a", "room-1", 50, "")
	if err != nil || len(page.Items) != 1 || page.Items[0].Name != "Standup timer" {
		t.Fatalf("launcher after approve: %+v %v", page.Items, err)
	}

	wd.navigate(strings.SplitN(srv.URL(), "?", 2)[0])
	wd.click(wd.find(fmt.Sprintf(`a[href="/p/%s"]`, other.ID)))
	wd.waitText("#decline", TextDecline)
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
