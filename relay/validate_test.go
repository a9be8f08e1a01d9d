package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// snippetArgs builds propose_room_snippet_app arguments; edit lets a case
// change one thing about an otherwise valid proposal.
func snippetArgs(t testing.TB, edit func(m map[string]any)) json.RawMessage {
	t.Helper()
	m := map[string]any{
		"room_id": "room-1",
		"name":    "Standup timer",
		"files": map[string]any{
			"src/App.tsx":    "export default function App() { return <div className=\"t\">15:00</div> }\n",
			"src/styles.css": ".t { font-size: 4rem; }\n",
		},
		"idempotency_key": "snip-0123456789abcdef0123456789abcdef",
	}
	if edit != nil {
		edit(m)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func files(m map[string]any) map[string]any { return m["files"].(map[string]any) }

// TestSeedCases is the seed's table of nine calls: which pass, which the
// published schema rejects and which need a server rule, with the message.
func TestSeedCases(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(m map[string]any)
		layer string // "", "schema" or "rule"
		rule  string // RuleError.Rule for rule rejections
		path  string // RuleError.Path
		msg   string // the wire message
	}{
		{"ok", nil, "", "", "", ""},
		{"no App.tsx", func(m map[string]any) { delete(files(m), "src/App.tsx") },
			"rule", RuleEntryPoint, "src/App.tsx", "rule: src/App.tsx missing (the Room runtime's entry point)"},
		{"absolute path", func(m map[string]any) { files(m)["/etc/hosts"] = "127.0.0.1 x" },
			"rule", RuleUnsafePath, "/etc/hosts", "rule: unsafe path '/etc/hosts' (absolute)"},
		{"dot-dot path", func(m map[string]any) { files(m)["src/../../x.ts"] = "x" },
			"rule", RuleUnsafePath, "src/../../x.ts", "rule: unsafe path 'src/../../x.ts' (dot-dot segment)"},
		{"backslash path", func(m map[string]any) { files(m)[`src\x.ts`] = "x" },
			"rule", RuleUnsafePath, `src\x.ts`, `rule: unsafe path 'src\\x.ts' (backslash)`},
		{"name 201 chars", func(m map[string]any) { m["name"] = strings.Repeat("n", 201) },
			"schema", "", "", "schema: '" + strings.Repeat("n", 39) + "…' is too long (name: 201 characters, maxLength 200)"},
		{"key 7 chars", func(m map[string]any) { m["idempotency_key"] = "abcdefg" },
			"schema", "", "", "schema: 'abcdefg' is too short (idempotency_key: minLength 8)"},
		{"extra field", func(m map[string]any) { m["visibility"] = "public" },
			"schema", "", "", "schema: additional property 'visibility' not allowed"},
		{"non-string file", func(m map[string]any) { m["files"] = map[string]any{"a": 1} },
			"schema", "", "", "schema: 1 is not of type string (files/a)"},
	}
	counts := map[string]int{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateArgs(CmdProposeRoomSnippetApp, snippetArgs(t, c.edit))
			if c.layer == "" {
				if err != nil {
					t.Fatalf("want PASS, got %v", err)
				}
				counts["pass"]++
				return
			}
			if err == nil {
				t.Fatalf("want REJECT %s, got PASS", c.msg)
			}
			we := AsError(err)
			if we.Code != CodeInvalidArgs || we.Retryable {
				t.Errorf("code %s retryable %v, want invalid_args, not retryable", we.Code, we.Retryable)
			}
			if we.Message != c.msg {
				t.Errorf("message\n got %q\nwant %q", we.Message, c.msg)
			}
			var re *RuleError
			isRule := errors.As(err, &re)
			if layer := map[bool]string{true: "rule", false: "schema"}[isRule]; layer != c.layer {
				t.Fatalf("rejected by %s, want %s", layer, c.layer)
			}
			if isRule && (re.Rule != c.rule || re.Path != c.path) {
				t.Errorf("rule %q path %q, want %q %q", re.Rule, re.Path, c.rule, c.path)
			}
			counts[c.layer]++
		})
	}
	// The seed: caught by the published schema 4, needing a server rule 4.
	if want := map[string]int{"pass": 1, "schema": 4, "rule": 4}; !reflect.DeepEqual(counts, want) {
		t.Errorf("outcomes %v, want %v", counts, want)
	}
}

// TestSnippetSchemaIsTheSeeds pins propose_room_snippet_app's schema to the
// seed's inputSchema: same keywords, same values.
func TestSnippetSchemaIsTheSeeds(t *testing.T) {
	const seed = `{ "type": "object",
    "properties": {
      "room_id": {"type": "string"},
      "name": {"type": "string", "maxLength": 200},
      "files": {"type": "object", "additionalProperties": {"type": "string"}},
      "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 128} },
    "required": ["room_id", "name", "files", "idempotency_key"],
    "additionalProperties": false }`
	var want, got map[string]any
	if err := json.Unmarshal([]byte(seed), &want); err != nil {
		t.Fatal(err)
	}
	b, ok := SchemaJSON(CmdProposeRoomSnippetApp)
	if !ok {
		t.Fatal("no schema")
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"$schema", "title", "description"} {
		delete(got, k) // annotations, not constraints
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("schema differs from the seed's:\n got %v\nwant %v", got, want)
	}
}

// TestEverySchema checks that each command has a schema that compiles,
// forbids additional properties at the top level, and accepts a valid call.
func TestEverySchema(t *testing.T) {
	valid := map[string]string{
		CmdReadRoom:              `{"room_id":"r"}`,
		CmdListRoomApps:          `{"room_id":"r","limit":50,"cursor":"c"}`,
		CmdReadRoomAppStatus:     `{"room_id":"r","instance_id":"i"}`,
		CmdProposeRoomSnippetApp: string(snippetArgs(t, nil)),
		CmdProposeRoomRepoApp:    `{"room_id":"r","name":"n","repository_id":"repo","version_id":"v1","idempotency_key":"repo-12345678"}`,
		CmdSmokeRunRoomApp:       `{"room_id":"r","instance_id":"i"}`,
	}
	if len(valid) != len(CommandNames()) {
		t.Fatalf("test covers %d commands, there are %d", len(valid), len(CommandNames()))
	}
	for _, name := range CommandNames() {
		b, ok := SchemaJSON(name)
		if !ok {
			t.Fatalf("%s: no schema", name)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if doc["additionalProperties"] != false || doc["title"] != name {
			t.Errorf("%s: additionalProperties %v title %v", name, doc["additionalProperties"], doc["title"])
		}
		if err := ValidateArgs(name, json.RawMessage(valid[name])); err != nil {
			t.Errorf("%s: valid call refused: %v", name, err)
		}
		extra := strings.TrimSuffix(valid[name], "}") + `,"x":1}`
		if err := ValidateArgs(name, json.RawMessage(extra)); err == nil ||
			AsError(err).Message != "schema: additional property 'x' not allowed" {
			t.Errorf("%s: extra property: %v", name, err)
		}
	}
	if _, ok := SchemaJSON("delete_room"); ok {
		t.Error("schema for an unknown command")
	}
}

func TestValidateArgsMessages(t *testing.T) {
	cases := []struct {
		command, args string
		code          Code
		msg           string
	}{
		{"read_room", `{"room_id":"r"}`, "", ""},
		{"read_room", ``, CodeInvalidArgs, "schema: missing property 'room_id'"},
		{"read_room", `null`, CodeInvalidArgs, "schema: null is not of type object"},
		{"read_room", `{"room_id":7}`, CodeInvalidArgs, "schema: 7 is not of type string (room_id)"},
		{"read_room", `{"room_id":"a","room_id":"b"}`, CodeInvalidArgs, "args are not valid JSON: duplicate key 'room_id'"},
		{"read_room", `{"room_id":"a"} {}`, CodeInvalidArgs, "args are not valid JSON: unexpected data after the JSON value"},
		{"read_room", `{"room_id":`, CodeInvalidArgs, "args are not valid JSON: unexpected EOF"},
		{"delete_room", `{}`, CodeCommandNotAllowed, "unknown command 'delete_room'"},
		{"list_room_apps", `{"room_id":"r","limit":0}`, CodeInvalidArgs, "schema: 0 is less than the minimum of 1 (limit)"},
		{"list_room_apps", `{"room_id":"r","limit":51}`, CodeInvalidArgs, "schema: 51 is greater than the maximum of 50 (limit)"},
		{"list_room_apps", `{"room_id":"r","limit":2.5}`, CodeInvalidArgs, "schema: 2.5 is not of type integer (limit)"},
		{"list_room_apps", `{"room_id":"r","limit":"5"}`, CodeInvalidArgs, "schema: '5' is not of type integer (limit)"},
		{"read_room_app_status", `{"room_id":"r"}`, CodeInvalidArgs, "schema: missing property 'instance_id'"},
		{"read_room_app_status", `{}`, CodeInvalidArgs, "schema: missing properties 'room_id', 'instance_id'"},
		{"propose_room_repo_app", `{"room_id":"r","name":"n","repository_id":"","version_id":"v","idempotency_key":"12345678","a":1,"b":[]}`,
			CodeInvalidArgs, "schema: '' is too short (repository_id: minLength 1); additional properties 'a', 'b' not allowed"},
		{"propose_room_repo_app", `{"room_id":"r","name":" ","repository_id":"x","version_id":"v","idempotency_key":"12345678"}`,
			CodeInvalidArgs, "rule: name is empty"},
		{"propose_room_snippet_app", string(snippetArgs(t, func(m map[string]any) { m["name"] = "Timer\u202e" })),
			CodeInvalidArgs, "rule: name has a character that does not print (U+202E at byte 5)"},
		{"propose_room_snippet_app", string(snippetArgs(t, func(m map[string]any) { m["files"] = []any{} })),
			CodeInvalidArgs, "schema: an array is not of type object (files)"},
		{"propose_room_snippet_app", string(snippetArgs(t, func(m map[string]any) { files(m)["a\x00b"] = true })),
			CodeInvalidArgs, `schema: true is not of type string (files/a\x00b)`},
		{"smoke_run_room_app", `[]`, CodeInvalidArgs, "schema: an array is not of type object"},
	}
	for _, c := range cases {
		t.Run(c.command+" "+c.args, func(t *testing.T) {
			err := ValidateArgs(c.command, json.RawMessage(c.args))
			if c.code == "" {
				if err != nil {
					t.Fatalf("unexpected %v", err)
				}
				return
			}
			we := AsError(err)
			if we == nil || we.Code != c.code || we.Message != c.msg {
				t.Fatalf("got %v\nwant %s: %s", we, c.code, c.msg)
			}
		})
	}
}

func TestDecodeArgs(t *testing.T) {
	var a ProposeSnippetArgs
	if err := DecodeArgs(CmdProposeRoomSnippetApp, snippetArgs(t, nil), &a); err != nil {
		t.Fatal(err)
	}
	if a.RoomID != "room-1" || len(a.Files) != 2 || a.IdempotencyKey == "" {
		t.Errorf("decoded %+v", a)
	}
	var l ListRoomAppsArgs
	if err := DecodeArgs(CmdListRoomApps, json.RawMessage(`{"room_id":"r","limit":7}`), &l); err != nil || l.Limit != 7 {
		t.Errorf("got %+v, %v", l, err)
	}
	// A refused call leaves v alone.
	var r ReadRoomArgs
	if err := DecodeArgs(CmdReadRoom, json.RawMessage(`{"room_id":"r","x":1}`), &r); err == nil || r.RoomID != "" {
		t.Errorf("got %+v, %v", r, err)
	}
}

func TestPaths(t *testing.T) {
	ok := []string{
		"src/App.tsx", "src/styles.css", "a", "src/components/Button.tsx", ".env", "src/.hidden/x.ts",
		"src/a b.tsx", "src/ünïcode.tsx", "src/日本語.tsx", "src/a..b.ts", "src/...x", "src/CONSOLE.tsx",
		"src/com10.ts", "src/lpt.ts", "src/auxiliary.ts", "src/x-y_z~1.ts", "src/emoji😀.tsx",
		strings.Repeat("a", MaxPathBytes),
	}
	for _, p := range ok {
		if err := CheckPath(p); err != nil {
			t.Errorf("CheckPath(%q) = %v, want ok", p, err)
		}
	}
	bad := []struct{ path, reason string }{
		{"", "empty"},
		{"src/\xff.ts", "invalid UTF-8"},
		{strings.Repeat("a", MaxPathBytes+1), "too long"},
		{"/etc/hosts", "absolute"},
		{"//server/share", "absolute"},
		{"C:/x.ts", "drive letter"},
		{"c:x.ts", "drive letter"},
		{`src\x.ts`, "backslash"},
		{`\\?\C:\x`, "backslash"},
		{"src/a\x00.ts", "control character"},
		{"src/a\n.ts", "control character"},
		{"src/a\t.ts", "control character"},
		{"src/a\x7f.ts", "control character"},
		{"src/a\u0085.ts", "control character"},
		{"src/App\u202e.tsx", "non-printing character"},
		{"src/\u200bApp.tsx", "non-printing character"},
		{"src/a\u00a0b.ts", "non-printing character"},
		{"src/a\ue000.ts", "non-printing character"},
		{"src/a\u2028.ts", "non-printing character"},
		{"src/a:b.ts", "reserved character"},
		{"src/a*.ts", "reserved character"},
		{"src/a?.ts", "reserved character"},
		{`src/"a".ts`, "reserved character"},
		{"src/a|b.ts", "reserved character"},
		{"src/<a>.ts", "reserved character"},
		{"src//x.ts", "empty segment"},
		{"src/", "empty segment"},
		{"./src/App.tsx", "dot segment"},
		{"src/./x.ts", "dot segment"},
		{"..", "dot-dot segment"},
		{"../x.ts", "dot-dot segment"},
		{"src/../../x.ts", "dot-dot segment"},
		{"src/x.ts.", "trailing dot or space"},
		{"src /x.ts", "trailing dot or space"},
		{"src/...", "trailing dot or space"},
		{"CON", "reserved name"},
		{"src/con.tsx", "reserved name"},
		{"src/Nul.d.ts", "reserved name"},
		{"src/aux", "reserved name"},
		{"src/PRN .ts", "reserved name"},
		{"src/com1.ts", "reserved name"},
		{"src/LPT9", "reserved name"},
		{"src/COM¹.ts", "reserved name"},
		{"src/conin$.ts", "reserved name"},
		{"lpt0/x.ts", "reserved name"},
		{"src/\uff0e\uff0e/x.ts", "dot-dot segment after Unicode normalization"},
		{"src\uff0fx.ts", "look-alike separator"}, // a fullwidth solidus reads as a folder the path does not have
		{"src/a\ufe55b.ts", "reserved character after Unicode normalization"},
		{"src/\uff23\uff2f\uff2e.ts", "reserved name after Unicode normalization"},
	}
	for _, c := range bad {
		err := CheckPath(c.path)
		if c.reason == "" {
			if err != nil {
				t.Errorf("CheckPath(%q) = %v, want ok", c.path, err)
			}
			continue
		}
		var re *RuleError
		if !errors.As(err, &re) {
			t.Errorf("CheckPath(%q) = %v, want a *RuleError (%s)", c.path, err, c.reason)
			continue
		}
		if re.Rule != RuleUnsafePath || re.Reason != c.reason || re.Path != c.path {
			t.Errorf("CheckPath(%q) = rule %q reason %q path %q, want reason %q", c.path, re.Rule, re.Reason, re.Path, c.reason)
		}
		if !strings.HasPrefix(re.Message, "rule: unsafe path '") || !strings.HasSuffix(re.Message, "("+c.reason+")") {
			t.Errorf("message %q", re.Message)
		}
		if AsError(err).Code != CodeInvalidArgs {
			t.Errorf("code %s", AsError(err).Code)
		}
	}
}

func TestSnippetRules(t *testing.T) {
	app := "export default () => null\n"
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{"src/App.tsx": app}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	many := func(n int) map[string]string {
		m := map[string]string{"src/App.tsx": app}
		for i := 1; i < n; i++ {
			m[fmt.Sprintf("src/f%d.ts", i)] = "x"
		}
		return m
	}
	cases := []struct {
		name  string
		files map[string]string
		rule  string
		path  string
		msg   string
	}{
		{"entry only", with(nil), "", "", ""},
		{"at the file limit", many(MaxSnippetFiles), "", "", ""},
		{"over the file limit", many(MaxSnippetFiles + 1), RuleFileCount, "",
			"rule: too many files (9, at most 8): the owner reviews every file of a snippet on one card; propose a pinned repository version with propose_room_repo_app instead"},
		{"21 files", many(21), RuleFileCount, "", ""},
		{"empty", map[string]string{}, RuleEntryPoint, "src/App.tsx", ""},
		{"entry in other case", map[string]string{"src/app.tsx": app}, RuleEntryPoint, "src/App.tsx", ""},
		{"case collision", with(map[string]string{"src/a.ts": "", "src/A.ts": ""}), RuleCollision, "src/a.ts",
			"rule: path 'src/a.ts' collides with 'src/A.ts' (the same file when case and Unicode normalization are ignored)"},
		{"entry case collision", with(map[string]string{"SRC/APP.TSX": ""}), RuleCollision, "src/App.tsx", ""},
		{"NFC/NFD collision", with(map[string]string{"src/caf\u00e9.ts": "", "src/cafe\u0301.ts": ""}), RuleCollision, "src/caf\u00e9.ts", ""},
		{"fullwidth collision", with(map[string]string{"src/a.ts": "", "src/\uff41.ts": ""}), RuleCollision, "src/\uff41.ts", ""},
		{"sharp s collision", with(map[string]string{"src/stra\u00dfe.ts": "", "src/STRASSE.ts": ""}), RuleCollision, "src/stra\u00dfe.ts", ""},
		{"file and folder", with(map[string]string{"src/lib": "", "src/lib/x.ts": ""}), RuleCollision, "src/lib",
			"rule: path 'src/lib' collides with 'src/lib/x.ts' (a file and a folder of the same name)"},
		{"file and folder, other case", with(map[string]string{"SRC": ""}), RuleCollision, "SRC", ""},
		{"unsafe before missing entry", map[string]string{"/x": ""}, RuleUnsafePath, "/x", ""},
		{"file at the size limit", with(map[string]string{"src/big.ts": strings.Repeat("x", MaxSnippetFileBytes)}), "", "", ""},
		{"file over the size limit", with(map[string]string{"src/big.ts": strings.Repeat("x", MaxSnippetFileBytes+1)}), RuleFileSize, "src/big.ts",
			"rule: file 'src/big.ts' is too large (32769 bytes, at most 32768 per file): propose a pinned repository version with propose_room_repo_app instead"},
		{"total over the limit", with(map[string]string{
			"src/a.ts": strings.Repeat("x", MaxSnippetFileBytes),
			"src/b.ts": strings.Repeat("x", MaxSnippetFileBytes)}), RuleTotalSize, "", ""},
		{"multi-byte content counts bytes", with(map[string]string{"src/a.ts": strings.Repeat("é", MaxSnippetFileBytes/2+1)}), RuleFileSize, "src/a.ts", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateSnippet(c.files)
			if c.rule == "" {
				if err != nil {
					t.Fatalf("unexpected %v", err)
				}
				return
			}
			var re *RuleError
			if !errors.As(err, &re) {
				t.Fatalf("got %v, want rule %s", err, c.rule)
			}
			if re.Rule != c.rule || re.Path != c.path {
				t.Errorf("rule %q path %q, want %q %q (%s)", re.Rule, re.Path, c.rule, c.path, re.Message)
			}
			if c.msg != "" && re.Message != c.msg {
				t.Errorf("message\n got %q\nwant %q", re.Message, c.msg)
			}
			if (re.Rule == RuleFileCount || re.Rule == RuleFileSize || re.Rule == RuleTotalSize) &&
				!strings.Contains(re.Message, CmdProposeRoomRepoApp) {
				t.Errorf("limit message does not point to the repo path: %s", re.Message)
			}
		})
	}
}

func TestRoomNotFound(t *testing.T) {
	e := RoomNotFound("r1")
	if e.Code != CodeNotFound || e.Message != "room 'r1' not found" {
		t.Errorf("got %v", e)
	}
}

// TestLookAlikesAreRefused: the review's look-alike paths and blank names.
func TestLookAlikesAreRefused(t *testing.T) {
	app := "export default () => null"
	for _, c := range []struct {
		what  string
		files map[string]string
		rule  string
		in    string
	}{
		{"fullwidth solidus", map[string]string{"src/App.tsx": app, "src／evil.ts": "x"}, RuleUnsafePath, "look-alike separator"},
		{"Cyrillic A beside Latin A", map[string]string{"src/App.tsx": app, "src/Аpp.tsx": "x"}, RuleCollision, `\u0410pp.tsx`},
		{"Greek omicron beside Latin o", map[string]string{"src/App.tsx": app, "src/foo.ts": "x", "src/fοo.ts": "y"}, RuleCollision, "looks like"},
		{"a blank segment", map[string]string{"src/App.tsx": app, "src/\u3164.ts": "x"}, RuleUnsafePath, "blank-looking segment"},
	} {
		err := ValidateSnippet(c.files)
		var re *RuleError
		if !errors.As(err, &re) || re.Rule != c.rule || !strings.Contains(err.Error(), c.in) {
			t.Errorf("%s: %v, want %s naming %q", c.what, err, c.rule, c.in)
		}
	}
	// Other scripts alone are fine: a path all in Cyrillic has no twin.
	if err := ValidateSnippet(map[string]string{"src/App.tsx": app, "src/привет.ts": "x"}); err != nil {
		t.Errorf("a Cyrillic path with no Latin twin: %v", err)
	}
	for _, name := range []string{"\u3164\u3164\u3164", "\u2800", " \u0301"} {
		if err := checkName(name); err == nil {
			t.Errorf("name %q renders blank but passed", name)
		}
	}
	if err := checkName("Стендап таймер"); err != nil {
		t.Errorf("a Cyrillic name: %v", err)
	}
}
