package review

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
)

const hostile = "export default function App() { return null }\n// </pre><script>alert(1)</script><img src=x onerror=alert(2)>\n"

// fixture is a real local store with one Room and proposals, behind the
// review handler on an httptest server.
type fixture struct {
	t     *testing.T
	store *rooms.Store
	h     *Handler
	ts    *httptest.Server
	c     *http.Client
}

func newFixture(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	ctx := context.Background()
	s, err := rooms.Open(ctx, filepath.Join(t.TempDir(), "rooms.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.CreateProject(ctx, "proj-a", "Project A"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRoom(ctx, rooms.NewRoom{ID: "room-1", ProjectID: "proj-a", Name: "Standup"}); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	h, err := NewHandler(s, ts.Listener.Addr().String(), nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = h
	ts.Start()
	t.Cleanup(ts.Close)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &fixture{t: t, store: s, h: h, ts: ts, c: c}
}

func (f *fixture) propose(name string, files map[string]string) rooms.Proposal {
	f.t.Helper()
	p, _, err := f.store.CreateProposal(context.Background(), rooms.NewProposal{ProjectID: "proj-a", RoomID: "room-1",
		Kind: rooms.SourceSnippet, Name: name, Files: files, IdempotencyKey: relay.SnippetKey("room-1", name, files)})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

type response struct {
	status int
	header http.Header
	body   string
}

func (f *fixture) do(req *http.Request) response {
	f.t.Helper()
	resp, err := f.c.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}

func (f *fixture) get(path string) response {
	req, _ := http.NewRequest(http.MethodGet, f.ts.URL+path, nil)
	return f.do(req)
}

// post sends a form as a same-origin browser would, then lets mod change it.
func (f *fixture) post(path string, form url.Values, mod func(*http.Request)) response {
	req, _ := http.NewRequest(http.MethodPost, f.ts.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", f.ts.URL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if mod != nil {
		mod(req)
	}
	return f.do(req)
}

// login exchanges the one-time token for the session cookie.
func (f *fixture) login() {
	f.t.Helper()
	u, _ := url.Parse(f.h.URL())
	r := f.get("/?" + u.RawQuery)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/" {
		f.t.Fatalf("token exchange: %d %q", r.status, r.header.Get("Location"))
	}
}

func (f *fixture) csrf() string {
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	return f.h.csrf
}

func (f *fixture) state(id string) string {
	f.t.Helper()
	d, err := f.store.GetProposal(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return d.State
}

func TestOneTimeToken(t *testing.T) {
	f := newFixture(t)
	p := f.propose("Timer", map[string]string{"src/App.tsx": "export default function App(){return null}\n"})
	if r := f.get("/"); r.status != http.StatusForbidden {
		t.Fatalf("no session: %d", r.status)
	}
	if r := f.get("/p/" + p.ID); r.status != http.StatusForbidden || strings.Contains(r.body, "App()") {
		t.Fatalf("proposal without a session: %d", r.status)
	}
	if r := f.get("/?token=wrong"); r.status != http.StatusForbidden {
		t.Fatalf("wrong token: %d", r.status)
	}
	f.login()
	r := f.get("/")
	if r.status != http.StatusOK || !strings.Contains(r.body, p.ID) || !strings.Contains(r.body, "Timer") {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	// The token is spent: a second browser (no cookie) cannot use it.
	other := &http.Client{CheckRedirect: f.c.CheckRedirect}
	u, _ := url.Parse(f.h.URL())
	resp, err := other.Get(f.ts.URL + "/?" + u.RawQuery)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("token reused: %d", resp.StatusCode)
	}
	// A guessed cookie does not work either.
	req, _ := http.NewRequest(http.MethodGet, f.ts.URL+"/", nil)
	req.AddCookie(&http.Cookie{Name: f.h.cookie, Value: "guess"})
	if resp, err := other.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("guessed cookie: %v %v", resp.StatusCode, err)
	}
}

func TestHostHeaderAndSecurityHeaders(t *testing.T) {
	f := newFixture(t)
	f.login()
	for _, host := range []string{"localhost" + f.ts.URL[strings.LastIndex(f.ts.URL, ":"):], "evil.example", "127.0.0.1"} {
		req, _ := http.NewRequest(http.MethodGet, f.ts.URL+"/", nil)
		req.Host = host
		if r := f.do(req); r.status != http.StatusMisdirectedRequest {
			t.Errorf("Host %q: %d, want 421", host, r.status)
		}
	}
	for _, path := range []string{"/", "/nope", "/static/review.css", "/p/prop_x"} {
		r := f.get(path)
		if got := r.header.Get("Content-Security-Policy"); got != CSP {
			t.Errorf("%s: CSP %q", path, got)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("Referrer-Policy") != "same-origin" || r.header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, r.header)
		}
	}
	for _, want := range []string{"default-src 'none'", "style-src 'self'", "form-action 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(CSP, want) || strings.Contains(CSP, "script-src") || strings.Contains(CSP, "unsafe") {
			t.Errorf("CSP %q lacks %q or allows script", CSP, want)
		}
	}
	if r := f.get("/p/prop_x"); r.status != http.StatusNotFound {
		t.Errorf("unknown proposal: %d", r.status)
	}
}

// codeRe finds each file's code block; tagRe the only markup the page
// puts inside one.
var (
	codeRe = regexp.MustCompile(`(?s)<pre class="file-content chroma w\d"><code>(.*?)</code></pre>`)
	lnRe   = regexp.MustCompile(`<span class="ln">\d+</span>`)
	tagRe  = regexp.MustCompile(`</?span[^<>]*>`)
)

// shownFiles is the text of each code block of a page as a reader sees
// it (line numbers left out), in page order. It fails if a block holds
// markup other than the page's own spans: file content must be escaped.
func shownFiles(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	for _, m := range codeRe.FindAllStringSubmatch(body, -1) {
		text := tagRe.ReplaceAllString(lnRe.ReplaceAllString(m[1], ""), "")
		if strings.ContainsAny(text, "<>") {
			t.Fatalf("markup inside a code block: %.200q", text)
		}
		out = append(out, html.UnescapeString(text))
	}
	return out
}

func TestFilesShownInFullAndEscaped(t *testing.T) {
	f := newFixture(t)
	long := strings.Repeat("// line of a long file\n", 400)
	files := map[string]string{"src/App.tsx": hostile, "src/styles.css": "body { color: red }\n", "src/long.ts": long,
		"src/data.json": `{"a": "</code></pre><script>x</script>"}`, "src/notes.txt": "no newline at the end",
		// Markup before a hidden character; a lexed file without a final
		// newline (the lexer adds one, the page must not).
		"src/mixed.ts": "// <img src=x onerror=alert(3)>\u202e</code>\n", "src/short.ts": "export const x = 1",
		// Carriage returns stay visible (chroma's default turns them into newlines).
		"src/crlf.ts": "const a = 1;\r\nconst b = 2;\rconst c = 3;\n"}
	p := f.propose("Hostile", files)
	f.login()
	r := f.get("/p/" + p.ID)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for _, want := range []string{
		"Review all proposed files (8)", TextApproval, TextApprove, TextDecline, p.ContentHash,
		"src/App.tsx", "src/styles.css", "src/long.ts", "9200 bytes, 400 lines", "21 bytes, 1 line<",
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("page lacks %.80q", want)
		}
	}
	if strings.Contains(r.body, "<script") || strings.Contains(r.body, "<img") {
		t.Errorf("file content escaped into markup:\n%s", r.body)
	}
	if !strings.Contains(r.body, "src/crlf.ts</code> <span class=\"muted file-size\">40 bytes, 2 lines, TypeScript</span>") {
		t.Error("the CRLF file is not highlighted")
	}
	// Every file in full, byte for byte, in path order.
	got := shownFiles(t, r.body)
	paths := []string{"src/App.tsx", "src/crlf.ts", "src/data.json", "src/long.ts", "src/mixed.ts", "src/notes.txt", "src/short.ts", "src/styles.css"}
	if len(got) != len(paths) {
		t.Fatalf("%d code blocks, want %d", len(got), len(paths))
	}
	for i, path := range paths {
		if got[i] != Printable(files[path]) {
			t.Errorf("%s shown as %.120q, want %.120q", path, got[i], Printable(files[path]))
		}
	}
}

func TestCSRFAndApprove(t *testing.T) {
	f := newFixture(t)
	p := f.propose("Timer", map[string]string{"src/App.tsx": "export default function App(){return null}\n"})
	f.login()
	good := url.Values{"csrf": {f.csrf()}, "hash": {p.ContentHash}}
	refusals := []struct {
		name string
		form url.Values
		mod  func(*http.Request)
	}{
		{"no csrf", url.Values{"hash": {p.ContentHash}}, nil},
		{"wrong csrf", url.Values{"csrf": {"x"}, "hash": {p.ContentHash}}, nil},
		{"cross-site origin", good, func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }},
		{"null origin", good, func(r *http.Request) { r.Header.Set("Origin", "null") }},
		{"cross-site fetch", good, func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }},
		{"same-site fetch", good, func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "same-site") }},
	}
	for _, tc := range refusals {
		if r := f.post("/p/"+p.ID+"/approve", tc.form, tc.mod); r.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", tc.name, r.status)
		}
	}
	// Without the session cookie even a correct form is refused.
	req, _ := http.NewRequest(http.MethodPost, f.ts.URL+"/p/"+p.ID+"/approve", strings.NewReader(good.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("no session: %v %v", resp.StatusCode, err)
	}
	// GET never changes state.
	if r := f.get("/p/" + p.ID + "/approve?csrf=" + f.csrf() + "&hash=" + p.ContentHash); r.status != http.StatusMethodNotAllowed {
		t.Errorf("GET approve: %d", r.status)
	}
	if st := f.state(p.ID); st != rooms.ProposalPending {
		t.Fatalf("a refused request changed the state to %s", st)
	}
	apps, _ := f.store.ListRoomApps(context.Background(), "proj-a", "room-1", 50, "")
	if len(apps.Items) != 0 {
		t.Fatalf("launcher before approval: %+v", apps.Items)
	}

	r := f.post("/p/"+p.ID+"/approve", good, nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, "launcher") {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	apps, _ = f.store.ListRoomApps(context.Background(), "proj-a", "room-1", 50, "")
	if len(apps.Items) != 1 || apps.Items[0].Name != "Timer" {
		t.Fatalf("launcher after approval: %+v", apps.Items)
	}
	if r := f.post("/p/"+p.ID+"/approve", good, nil); r.status != http.StatusConflict {
		t.Errorf("second approve: %d", r.status)
	}
}

func TestApprovalBindsToShownHash(t *testing.T) {
	f := newFixture(t)
	p := f.propose("Timer", map[string]string{"src/App.tsx": "export default function App(){return null}\n"})
	f.login()
	stale := relay.ContentHash(map[string]string{"src/App.tsx": "export default function App(){return 1}\n"})
	r := f.post("/p/"+p.ID+"/approve", url.Values{"csrf": {f.csrf()}, "hash": {stale}}, nil)
	if r.status != http.StatusConflict || !strings.Contains(r.body, "content changed") {
		t.Fatalf("stale hash: %d %s", r.status, r.body)
	}
	if st := f.state(p.ID); st != rooms.ProposalPending {
		t.Fatalf("state %s after a refused approval", st)
	}
}

func TestDecline(t *testing.T) {
	f := newFixture(t)
	p := f.propose("Timer", map[string]string{"src/App.tsx": "export default function App(){return null}\n"})
	f.login()
	r := f.post("/p/"+p.ID+"/decline", url.Values{"csrf": {f.csrf()}}, nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, "declined") {
		t.Fatalf("decline: %d %s", r.status, r.body)
	}
	d, _ := f.store.GetProposal(context.Background(), p.ID)
	if d.State != rooms.ProposalDeclined || len(d.Files) != 0 {
		t.Fatalf("after decline: %s, %d files", d.State, len(d.Files))
	}
	if r := f.get("/"); strings.Contains(r.body, p.ID) {
		t.Errorf("declined proposal still listed as pending")
	}
	apps, _ := f.store.ListRoomApps(context.Background(), "proj-a", "room-1", 50, "")
	if len(apps.Items) != 0 {
		t.Fatalf("launcher after decline: %+v", apps.Items)
	}
}

func TestServerListensOnLoopback(t *testing.T) {
	s, err := Listen(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(s.URL())
	if err != nil || u.Hostname() != "127.0.0.1" || u.Port() == "0" || len(u.Query().Get("token")) < 40 {
		t.Fatalf("URL %q", s.URL())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	resp, err := http.Get("http://" + u.Host + "/static/review.css")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/css; charset=utf-8" {
		t.Fatalf("css: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestScanHidden(t *testing.T) {
	if h := ScanHidden("plain\n\tcode ❤️"); h.Any() {
		t.Errorf("plain text: %+v", h)
	}
	h := ScanHidden("\u202e\u202e\u200b\x1b")
	if h.Bidi != 2 || h.Invisible != 1 || h.Control != 1 || h.String() != "2 bidi controls, 1 invisible character, 1 control character (U+202E, U+200B, U+001B)" {
		t.Errorf("got %+v %q", h, h.String())
	}
	many := ScanHidden("\u202a\u202b\u202c\u202d\u202e\u2066\u2067")
	if !strings.HasSuffix(many.String(), "U+2066, …)") {
		t.Errorf("many: %q", many.String())
	}
}

func TestPrintable(t *testing.T) {
	cases := map[string]string{
		"plain\n\tcode":           "plain\n\tcode",
		"a\x1b[2Kb":               "a⟨U+001B⟩[2Kb",
		"ok\rhidden":              "ok⟨U+000D⟩hidden",
		"if (x \u202e} \u2066{ y": "if (x ⟨U+202E⟩} ⟨U+2066⟩{ y",
		"naïve 日本 </pre>":         "naïve 日本 </pre>",
		"is\u200bAdmin":           "is⟨U+200B⟩Admin",
		"\ufeffa\u2060b\u3164":    "⟨U+FEFF⟩a⟨U+2060⟩b⟨U+3164⟩",
		"tag\U000E0041":           "tag⟨U+E0041⟩",
		"line\u2028sep":           "line⟨U+2028⟩sep",
		"emoji ❤️ é":              "emoji ❤️ é", // U+FE0F and combining marks stay
	}
	for in, want := range cases {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
