// Package webdriver drives headless Chromium through chromedriver's W3C
// WebDriver HTTP API, for the tests of the pages people use in a browser
// (the review page, the OAuth sign-in). The tests run when
// ROOMRELAY_BROWSER=1 (CI sets it through .ci/browser-tests) and then fail,
// not skip, when the browser is missing.
package webdriver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Env is the variable that turns the browser tests on.
const Env = "ROOMRELAY_BROWSER"

// Look finds chromium and chromedriver, skipping the test unless Env=1
// and failing it when they are missing then.
func Look(t *testing.T) (chromium, driver string) {
	t.Helper()
	if os.Getenv(Env) != "1" {
		t.Skipf("set %s=1 to run this page in headless Chromium (needs Debian's chromium and chromium-driver)", Env)
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			chromium = p
			break
		}
	}
	driver, err := exec.LookPath("chromedriver")
	if chromium == "" || err != nil {
		t.Fatalf("%s=1 but chromium (%q) or chromedriver (%v) is missing: apt-get install -y chromium chromium-driver", Env, chromium, err)
	}
	return chromium, driver
}

// ArtifactDir is where screenshots go: ROOMRELAY_ARTIFACTS
// (dist/artifacts/browser in CI), or a temporary directory.
func ArtifactDir(t *testing.T) string {
	if d := os.Getenv("ROOMRELAY_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// Driver is a minimal W3C WebDriver client on one session.
type Driver struct {
	t       *testing.T
	base    string
	session string
}

const elementKey = "element-6066-11e4-a52e-4f735466cecf"

// Call is one WebDriver command; a non-200 answer fails the test.
func (wd *Driver) Call(method, path string, in any) json.RawMessage {
	wd.t.Helper()
	v, status, raw := wd.Try(method, path, in)
	if status != http.StatusOK {
		wd.t.Fatalf("webdriver %s %s: %d %.500s", method, path, status, raw)
	}
	return v
}

// Try is Call without failing the test: the value, the HTTP status and
// the raw body.
func (wd *Driver) Try(method, path string, in any) (json.RawMessage, int, []byte) {
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

// WaitText waits (up to 15 s) until the element css shows want, and
// returns what it last showed: after a click that submits a form, the old
// page's element can still be found (and then go stale) until the browser
// has navigated.
func (wd *Driver) WaitText(css, want string) string {
	wd.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		raw, status, _ := wd.Try(http.MethodPost, wd.S("/element"), map[string]string{"using": "css selector", "value": css})
		var v map[string]string
		if status == http.StatusOK && json.Unmarshal(raw, &v) == nil && v[elementKey] != "" {
			if tv, st, _ := wd.Try(http.MethodGet, wd.S("/element/"+v[elementKey]+"/text"), nil); st == http.StatusOK {
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

// S is a path in the session.
func (wd *Driver) S(path string) string { return "/session/" + wd.session + path }

// Navigate opens url.
func (wd *Driver) Navigate(url string) {
	wd.Call(http.MethodPost, wd.S("/url"), map[string]string{"url": url})
}

// URL is the address the browser shows.
func (wd *Driver) URL() string {
	var u string
	_ = json.Unmarshal(wd.Call(http.MethodGet, wd.S("/url"), nil), &u)
	return u
}

// Find is the element css selects; none fails the test.
func (wd *Driver) Find(css string) string {
	wd.t.Helper()
	var v map[string]string
	raw := wd.Call(http.MethodPost, wd.S("/element"), map[string]string{"using": "css selector", "value": css})
	if err := json.Unmarshal(raw, &v); err != nil || v[elementKey] == "" {
		wd.t.Fatalf("find %s: %s (%v)", css, raw, err)
	}
	return v[elementKey]
}

// FindAll is every element css selects.
func (wd *Driver) FindAll(css string) []string {
	var vs []map[string]string
	_ = json.Unmarshal(wd.Call(http.MethodPost, wd.S("/elements"), map[string]string{"using": "css selector", "value": css}), &vs)
	ids := make([]string, len(vs))
	for i, v := range vs {
		ids[i] = v[elementKey]
	}
	return ids
}

// Text is what the user sees of an element (rendered text).
func (wd *Driver) Text(el string) string {
	var s string
	_ = json.Unmarshal(wd.Call(http.MethodGet, wd.S("/element/"+el+"/text"), nil), &s)
	return s
}

// Script runs JavaScript through the driver (outside the page's CSP).
func (wd *Driver) Script(src string, args ...any) json.RawMessage {
	if args == nil {
		args = []any{}
	}
	return wd.Call(http.MethodPost, wd.S("/execute/sync"), map[string]any{"script": src, "args": args})
}

// Click clicks an element.
func (wd *Driver) Click(el string) {
	wd.Call(http.MethodPost, wd.S("/element/"+el+"/click"), map[string]any{})
}

// Screenshot saves the window as a PNG.
func (wd *Driver) Screenshot(path string) {
	wd.t.Helper()
	var b64 string
	_ = json.Unmarshal(wd.Call(http.MethodGet, wd.S("/screenshot"), nil), &b64)
	png, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(png) < 8 || string(png[1:4]) != "PNG" {
		wd.t.Fatalf("screenshot is not a PNG (%v)", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		wd.t.Fatal(err)
	}
	wd.t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// ScreenshotPage saves the whole page, not only the window: the window is
// grown to the document's height for the shot, then put back.
func (wd *Driver) ScreenshotPage(path string) {
	wd.t.Helper()
	var h int
	_ = json.Unmarshal(wd.Script(`return Math.ceil(document.documentElement.scrollHeight)`), &h)
	var rect struct{ Width, Height int }
	_ = json.Unmarshal(wd.Call(http.MethodGet, wd.S("/window/rect"), nil), &rect)
	if h > rect.Height {
		wd.Call(http.MethodPost, wd.S("/window/rect"), map[string]int{"width": rect.Width, "height": min(h+120, 12000)})
		defer wd.Call(http.MethodPost, wd.S("/window/rect"), map[string]int{"width": rect.Width, "height": rect.Height})
	}
	wd.Screenshot(path)
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Start runs chromedriver and opens a headless Chromium session, both
// ended with the test.
func Start(t *testing.T, chromium, driver string) *Driver {
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
	wd := &Driver{t: t, base: "http://127.0.0.1:" + strconv.Itoa(port)}
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
	if err := json.Unmarshal(wd.Call(http.MethodPost, "/session", caps), &sess); err != nil || sess.SessionID == "" {
		t.Fatalf("new session: %v", err)
	}
	wd.session = sess.SessionID
	t.Cleanup(func() { wd.Call(http.MethodDelete, wd.S(""), nil) })
	return wd
}
