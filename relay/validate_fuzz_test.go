package relay

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCheckPath checks the path checker against properties that hold for
// any input: it never panics; whatever it accepts is valid UTF-8, relative,
// free of '\\', control characters and '.'/'..'/empty segments, and short
// enough; whatever it refuses is a *RuleError naming the path.
func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{
		"src/App.tsx", "/etc/hosts", "src/../../x.ts", `src\x.ts`, "C:/x", "src//a", "src/",
		"CON.tsx", "src/a\x00", "src/\uff0e\uff0e/x", "src/caf\u00e9.ts", "src/x. ", "\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		err := CheckPath(p)
		if err != nil {
			var re *RuleError
			if !errors.As(err, &re) || re.Rule != RuleUnsafePath || re.Path != p || re.Reason == "" {
				t.Fatalf("CheckPath(%q) = %#v", p, err)
			}
			if !strings.HasPrefix(re.Message, "rule: unsafe path ") || !utf8.ValidString(re.Message) {
				t.Fatalf("message %q", re.Message)
			}
			return
		}
		if p == "" || !utf8.ValidString(p) || len(p) > MaxPathBytes || p[0] == '/' || strings.ContainsAny(p, "\\:\x00") {
			t.Fatalf("accepted %q", p)
		}
		for _, r := range p {
			if r < 0x20 || r == 0x7f {
				t.Fatalf("accepted %q with a control character", p)
			}
		}
		for _, seg := range strings.Split(p, "/") {
			if seg == "" || seg == "." || seg == ".." || strings.HasSuffix(seg, ".") || strings.HasSuffix(seg, " ") {
				t.Fatalf("accepted %q with segment %q", p, seg)
			}
		}
		// An accepted path is accepted with its twin in a snippet unless they collide.
		if err := ValidateSnippet(map[string]string{EntryPoint: "", p: ""}); err != nil {
			var re *RuleError
			if !errors.As(err, &re) || re.Rule != RuleCollision {
				t.Fatalf("snippet with accepted path %q: %v", p, err)
			}
		}
	})
}

// FuzzValidateArgs feeds arbitrary bytes as snippet arguments: no panic,
// and every refusal is invalid_args with a "schema:", "rule:" or "args"
// message.
func FuzzValidateArgs(f *testing.F) {
	f.Add([]byte(`{"room_id":"r","name":"n","files":{"src/App.tsx":"x"},"idempotency_key":"12345678"}`))
	f.Add([]byte(`{"room_id":"r","name":"n","files":{"a":1},"idempotency_key":"1"}`))
	f.Add([]byte(`{"files":{"src/App.tsx":"x","src/App.tsx":"y"}}`))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		err := ValidateArgs(CmdProposeRoomSnippetApp, data)
		if err == nil {
			return
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidArgs {
			t.Fatalf("refusal %#v", err)
		}
		if !strings.HasPrefix(e.Message, "schema: ") && !strings.HasPrefix(e.Message, "rule: ") &&
			!strings.HasPrefix(e.Message, "args are not valid JSON: ") {
			t.Fatalf("message %q", e.Message)
		}
	})
}
