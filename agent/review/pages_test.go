package review

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alecthomas/chroma/v2"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/examples"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/sandbox"
)

// The proposal page's aids to reading: line numbers, highlighting, the
// hidden-character banner, who and when, the sandbox check.

// TestLineNumbersAndHighlighting: each line is numbered with its own
// anchor, TypeScript and CSS are coloured by class, and the classes' style
// sheet comes from this origin (the CSP allows no inline style).
func TestLineNumbersAndHighlighting(t *testing.T) {
	f := newFixture(t)
	app, err := os.ReadFile(filepath.Join("..", "..", "examples", "standup-timer", "src", "App.tsx"))
	if err != nil {
		t.Fatal(err)
	}
	p := f.propose("Timer", map[string]string{"src/App.tsx": string(app), "src/styles.css": "body { color: red }\n", "src/x.txt": "a\nb"})
	f.login()
	r := f.get("/p/" + p.ID)
	lines := strings.Count(string(app), "\n")
	for _, want := range []string{
		`<span class="line" id="f1-L1"><span class="ln">1</span><span class="cl"><span class="kr">import</span>`,
		fmt.Sprintf(`id="f1-L%d"><span class="ln">%d</span>`, lines, lines),
		`<span class="kd">function</span>`, `<span class="s2">&#34;react&#34;</span>`,
		`, TypeScript</span>`, `, CSS</span>`, `<span class="nt">body</span>`,
		`id="f3-L2"><span class="ln">2</span><span class="cl">b</span></span>`,
		`<link rel="stylesheet" href="/static/highlight.css">`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(r.body, fmt.Sprintf(`id="f1-L%d"`, lines+1)) {
		t.Errorf("a line past the file's %d is numbered", lines)
	}
	if strings.Contains(r.body, "style=") {
		t.Error("inline style attribute: the CSP refuses it")
	}
	css := f.get("/static/highlight.css")
	if css.status != http.StatusOK || css.header.Get("Content-Type") != "text/css; charset=utf-8" ||
		!strings.Contains(css.body, ".chroma .kr {") || !strings.Contains(css.body, ".chroma .s2 {") {
		t.Fatalf("highlight.css: %d %q\n%s", css.status, css.header.Get("Content-Type"), css.body)
	}
}

// TestHiddenCharacterBanner: a file holding bidi controls or invisible
// characters gets a banner above the files naming it, and the characters
// stay marked inline; a clean proposal has no banner.
func TestHiddenCharacterBanner(t *testing.T) {
	f := newFixture(t)
	trojan := "const isAdmin = false;\n/*\u202e } \u2066if (isAdmin)\u2069 \u2066 begin admins only */\nconst a\u200bb = 1;\n"
	bad := f.propose("Trojan", map[string]string{"src/App.tsx": "export default function App(){return null}\n", "src/auth.ts": trojan})
	clean := f.propose("Clean", map[string]string{"src/App.tsx": "export default function App(){return null}\n"})
	f.login()
	r := f.get("/p/" + bad.ID)
	banner := strings.Index(r.body, `id="hidden-banner"`)
	files := strings.Index(r.body, `id="files-heading"`)
	if banner < 0 || files < 0 || banner > files {
		t.Fatalf("banner at %d, files at %d:\n%s", banner, files, r.body)
	}
	for _, want := range []string{
		// html/template writes "+" as "&#43;" in text.
		`<a href="#f2"><code>src/auth.ts</code></a>: 4 bidi controls, 1 invisible character (U&#43;202E, U&#43;2066, U&#43;2069, U&#43;200B)`,
		`<span class="hidden-char hidden-bidi" title="bidi control: reorders how the text reads">⟨U+202E⟩</span>`,
		`<span class="hidden-char hidden-invisible" title="invisible character">⟨U+200B⟩</span>`,
		"Trojan Source",
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.ContainsAny(r.body, "\u202e\u2066\u2069\u200b") {
		t.Error("a hidden character reached the page unmarked")
	}
	if strings.Contains(r.body, "src/App.tsx</code></a>:") {
		t.Error("the clean file is named in the banner")
	}
	if r := f.get("/p/" + clean.ID); r.status != http.StatusOK || strings.Contains(r.body, "hidden-banner") || strings.Contains(r.body, "hidden-char") {
		t.Errorf("clean proposal: %d, banner shown", r.status)
	}
}

// TestProposerAndArrival: who proposed it (escaped) and when it arrived.
func TestProposerAndArrival(t *testing.T) {
	f := newFixture(t)
	files := map[string]string{"src/App.tsx": "export default function App(){return null}\n"}
	p, _, err := f.store.CreateProposal(context.Background(), rooms.NewProposal{ProjectID: "proj-a", RoomID: "room-1",
		Kind: rooms.SourceSnippet, Name: "Timer", Files: files, IdempotencyKey: relay.SnippetKey("room-1", "Timer", files),
		ProposedBy: `MCP client token "ci <b>bot</b>" (ct_123)`})
	if err != nil {
		t.Fatal(err)
	}
	old := f.propose("Old", map[string]string{"src/App.tsx": "export default function App(){return 1}\n"})
	f.login()
	r := f.get("/p/" + p.ID)
	for _, want := range []string{
		`<dd id="proposed-by">MCP client token &#34;ci &lt;b&gt;bot&lt;/b&gt;&#34; (ct_123)</dd>`,
		`>` + p.CreatedAt.UTC().Format(TimeFormat) + `</time>`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(r.body, "<b>") {
		t.Error("the proposer's name became markup")
	}
	if r := f.get("/p/" + old.ID); !strings.Contains(r.body, `<dd id="proposed-by">not recorded`) {
		t.Error("a proposal without a recorded proposer does not say so")
	}
	if r := f.get("/"); !strings.Contains(r.body, `<td class="proposed-by">MCP client token &#34;ci &lt;b&gt;`) {
		t.Error("the list lacks the proposer")
	}
}

// fakeChecker records what it was asked and answers as told.
type fakeChecker struct {
	mu      sync.Mutex
	calls   []map[string]string
	summary string
	ok      bool
	err     error
	block   bool // wait for the context to end
}

func (c *fakeChecker) Check(ctx context.Context, files map[string]string) (string, bool, error) {
	c.mu.Lock()
	c.calls = append(c.calls, files)
	summary, ok, err, block := c.summary, c.ok, c.err, c.block
	c.mu.Unlock()
	if block {
		select {
		case <-ctx.Done():
			return "", false, ctx.Err()
		case <-time.After(10 * time.Second):
			return "", false, errors.New("fake checker: the page gave the check no deadline")
		}
	}
	return summary, ok, err
}

func (c *fakeChecker) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.calls)
}

// TestSandboxCheckOnThePage: the check of the pending files is shown
// before the buttons, run once per content, never approving anything; a
// check that cannot run says why and runs again on the next visit.
func TestSandboxCheckOnThePage(t *testing.T) {
	fc := &fakeChecker{summary: "passes the proposal rules, builds, renders 12 elements", ok: true}
	f := newFixture(t, WithChecker(fc, 0))
	files := map[string]string{"src/App.tsx": "export default function App(){return null}\n"}
	p := f.propose("Timer", files)
	f.login()
	r := f.get("/p/" + p.ID)
	check := strings.Index(r.body, `id="sandbox-check"`)
	approve := strings.Index(r.body, `id="approve"`)
	if check < 0 || approve < 0 || check > approve {
		t.Fatalf("check at %d, approve button at %d", check, approve)
	}
	if !strings.Contains(r.body, `<section class="check check-ok" id="sandbox-check">`) ||
		!strings.Contains(r.body, `Passed:</span> <span class="check-summary">passes the proposal rules, builds, renders 12 elements</span>`) {
		t.Errorf("check line missing:\n%s", r.body)
	}
	if fc.count() != 1 || !maps.Equal(fc.calls[0], files) {
		t.Fatalf("checker calls %v", fc.calls)
	}
	// Checking is reading: the proposal is still pending, not an app.
	if st := f.state(p.ID); st != rooms.ProposalPending {
		t.Fatalf("state %s after a check", st)
	}
	if apps, _ := f.store.ListRoomApps(context.Background(), "proj-a", "room-1", 50, ""); len(apps.Items) != 0 {
		t.Fatalf("a checked proposal is in the launcher: %+v", apps.Items)
	}
	f.get("/p/" + p.ID)
	if fc.count() != 1 {
		t.Errorf("the same content was checked %d times", fc.count())
	}

	fc.summary, fc.ok = `does not build: TSX error at src/App.tsx:1:5: <oops>`, false
	broken := f.propose("Broken", map[string]string{"src/App.tsx": "export default function App(){return <}\n"})
	if r := f.get("/p/" + broken.ID); !strings.Contains(r.body, `check-failed`) ||
		!strings.Contains(r.body, `Failed:</span> <span class="check-summary">does not build: TSX error at src/App.tsx:1:5: &lt;oops&gt;</span>`) {
		t.Errorf("failed check not shown:\n%s", r.body)
	}

	fc.err = ErrRuntimeMissing
	other := f.propose("Other", map[string]string{"src/App.tsx": "export default function App(){return 2}\n"})
	for range 2 {
		if r := f.get("/p/" + other.ID); !strings.Contains(r.body, "Not checked:</span> <span class=\"check-summary\">React runtime missing; run `roomrelay snippet fetch-runtime`") {
			t.Errorf("runtime missing not shown:\n%s", r.body)
		}
	}
	if fc.count() != 4 {
		t.Errorf("a check that could not run was cached (%d calls, want 4)", fc.count())
	}

	// Decided proposals are not checked.
	n := fc.count()
	if _, err := f.store.DeclineProposal(context.Background(), broken.ID); err != nil {
		t.Fatal(err)
	}
	if r := f.get("/p/" + broken.ID); strings.Contains(r.body, "sandbox-check") || fc.count() != n {
		t.Errorf("a declined proposal was checked")
	}
}

func TestSandboxCheckTimeoutAndNone(t *testing.T) {
	fc := &fakeChecker{block: true}
	f := newFixture(t, WithChecker(fc, 50*time.Millisecond))
	p := f.propose("Timer", map[string]string{"src/App.tsx": "export default function App(){return null}\n"})
	f.login()
	if r := f.get("/p/" + p.ID); !strings.Contains(r.body, "Not checked:</span> <span class=\"check-summary\">the sandbox check did not finish within 50ms") {
		t.Errorf("timeout not shown:\n%s", r.body)
	}
	g := newFixture(t)
	q := g.propose("Timer", map[string]string{"src/App.tsx": "export default function App(){return null}\n"})
	g.login()
	if r := g.get("/p/" + q.ID); !strings.Contains(r.body, "Not checked:</span> <span class=\"check-summary\">this review page was started without the sandbox") {
		t.Errorf("no checker not shown:\n%s", r.body)
	}
}

func TestCheckSummary(t *testing.T) {
	cases := []struct {
		r    sandbox.Result
		want string
	}{
		{sandbox.Result{OK: true, Phase: sandbox.PhaseDone, Clicks: 1, Render: &sandbox.RenderSummary{ElementCount: 1, Elements: map[string]int{"div": 1}}},
			"passes the proposal rules, builds, renders 1 element, 1 onClick handler clicked without error"},
		{sandbox.Result{OK: true, Phase: sandbox.PhaseDone, Clicks: 3, Console: []string{"log: a", "warn: b"}, ConsoleDropped: 1,
			Render: &sandbox.RenderSummary{ElementCount: 12, Elements: map[string]int{"button": 3, "div": 9}}},
			"passes the proposal rules, builds, renders 12 elements (3 buttons), 3 onClick handlers clicked without error; 3 console lines"},
		{sandbox.Result{Phase: sandbox.PhaseBuild, BuildErrors: []sandbox.Message{{File: "src/App.tsx", Line: 3, Column: 7, Text: "Unexpected \"}\""}, {Text: "x"}}},
			`does not build: TSX error at src/App.tsx:3:7: Unexpected "}" (and 1 more)`},
		{sandbox.Result{Phase: sandbox.PhaseEvents, Error: &sandbox.ErrorInfo{Message: "TypeError: x is undefined", File: "src/App.tsx", Line: 9, Column: 2, Note: "no DOM"}},
			"fails in the smoke-run while clicking its onClick handlers at src/App.tsx:9:2: TypeError: x is undefined (no DOM)"},
		{sandbox.Result{Phase: sandbox.PhaseTimeout, Error: &sandbox.ErrorInfo{Message: "ran for 2s"}},
			"fails in the smoke-run past its time limit: ran for 2s"},
	}
	for _, c := range cases {
		if got := CheckSummary(&c.r); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}

// rewritingLexer stands for a lexer that changes the text it tokenises.
type rewritingLexer struct {
	chroma.Lexer
	value string
}

func (l rewritingLexer) Tokenise(*chroma.TokeniseOptions, string) (chroma.Iterator, error) {
	return chroma.Literator(chroma.Token{Type: chroma.Keyword, Value: l.value}), nil
}

// TestTokeniseKeepsTheBytes: highlighting that would show other text than
// the file's is dropped, so the page shows the file as plain text.
func TestTokeniseKeepsTheBytes(t *testing.T) {
	ts, err := lexers["typescript"]()
	if err != nil {
		t.Fatal(err)
	}
	far := time.Now().Add(time.Minute)
	if _, ok := tokenise(ts, "const a = 1;\r\n", far); !ok {
		t.Fatal("a real file was refused")
	}
	for _, v := range []string{"const b = 1;\n", "const a = 1;\n\n", "const"} {
		if _, ok := tokenise(rewritingLexer{ts, v}, "const a = 1;\n", far); ok {
			t.Errorf("tokens %q accepted for another text", v)
		}
	}
	if _, ok := tokenise(ts, strings.Repeat("a = 1;\n", 1000), time.Now()); ok {
		t.Error("lexing went on past the deadline")
	}
}

// TestLexersKeepEveryByte: on the example snippet and on hostile text, our
// three rule tables give tokens that are exactly the file's bytes (a rule
// that swallowed or invented text would show the reviewer something else).
func TestLexersKeepEveryByte(t *testing.T) {
	far := time.Now().Add(time.Minute)
	inputs := map[string][]string{
		"typescript": {examples.StandupTimer()["src/App.tsx"], "const s = `a ${b ? `c${d}` : '}'} e`;\r\n/* x */ <A b={1}>t</A>", "'unterminated\n\"x\\\"y\"", "\u202e\u200b\x00"},
		"css":        {examples.StandupTimer()["src/styles.css"], "a{b:c;{d}}}", "@media x { .a::after { content: '}' } }"},
		"json":       {`{"a": [1, -2.5e3, true, null, "\"x"]}`, "{\"unterminated"},
	}
	for name, texts := range inputs {
		l, err := lexers[name]()
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range texts {
			toks, ok := tokenise(l, text, far)
			if !ok {
				t.Errorf("%s: tokens differ from %q", name, text)
				continue
			}
			kinds := map[chroma.TokenType]bool{}
			for _, tk := range toks {
				kinds[tk.Type] = true
			}
			if len(kinds) < 2 && len(text) > 20 {
				t.Errorf("%s: %q lexed as one kind of token only", name, text)
			}
		}
	}
}
