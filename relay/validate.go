package relay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Reviewer-attention limits for a snippet proposal. The owner reads every
// file in full on one card before approving; the seed's example app is two
// files and 3 KB, and "nobody reads 21 files on one card". Anything larger
// belongs in a repository version, proposed with propose_room_repo_app.
const (
	MaxSnippetFiles      = 8        // files per proposal
	MaxSnippetFileBytes  = 32 << 10 // bytes of one file's content (UTF-8)
	MaxSnippetTotalBytes = 64 << 10 // bytes of all contents together; paths not counted
	MaxPathBytes         = 255      // bytes of one path (UTF-8)
)

// EntryPoint is the file the Room runtime starts a snippet from.
const EntryPoint = "src/App.tsx"

// Rules a proposal can break on top of its schema (RuleError.Rule).
const (
	RuleEntryPoint = "entry-point"    // src/App.tsx missing
	RuleUnsafePath = "unsafe-path"    // RuleError.Reason says why
	RuleCollision  = "path-collision" // two paths name the same file, or a file and a folder
	RuleFileCount  = "file-count"
	RuleFileSize   = "file-size"
	RuleTotalSize  = "total-size"
	RuleName       = "name" // blank, or a character that does not print
)

// RuleError is a proposal rejected by a server rule rather than its schema.
// It names the rule, the reason within it (for unsafe-path) and the path.
// On the wire it is an invalid_args *Error whose message is Message:
// errors.As(err, &relayErr) and AsError both yield that, so callers need not
// know this type unless they want the rule.
type RuleError struct {
	Rule    string // one of the Rule* constants
	Reason  string // for RuleUnsafePath: "absolute", "dot-dot segment", ...
	Path    string // the offending path, or "" when the rule is about the whole proposal
	Message string // "rule: unsafe path '/etc/hosts' (absolute)"
}

func (e *RuleError) Error() string { return e.Message }

// As lets errors.As find the wire form of a rule error.
func (e *RuleError) As(target any) bool {
	if t, ok := target.(**Error); ok {
		*t = Errorf(CodeInvalidArgs, "%s", e.Message)
		return true
	}
	return false
}

// RoomNotFound is the one error for a room that does not exist and for a
// room the allowlist hides: the two must not be told apart.
func RoomNotFound(roomID string) *Error {
	return Errorf(CodeNotFound, "room %s not found", quoteN(roomID, 80))
}

// ValidateArgs checks a command's arguments as the device will: strict JSON
// (no duplicate keys, nothing after the value), the command's JSON Schema,
// then the server rules for proposals (ValidateSnippet, and a printable,
// non-blank name).
//
// An unknown command name is command_not_allowed ("unknown command"): no
// allowlist can allow it, and it is the answer the device gives anyway.
// Everything else is invalid_args with a message that starts with "schema:"
// or "rule:" and names the broken rule and where; a rule failure is also a
// *RuleError in the chain.
func ValidateArgs(command string, args json.RawMessage) error {
	if !KnownCommand(command) {
		return Errorf(CodeCommandNotAllowed, "unknown command %s", quote(command))
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	doc, err := decodeStrict(args)
	if err != nil {
		return Errorf(CodeInvalidArgs, "args are not valid JSON: %v", err)
	}
	if err := checkSchema(command, doc); err != nil {
		return err
	}
	obj := doc.(map[string]any) // every schema requires an object
	switch command {
	case CmdProposeRoomSnippetApp:
		if err := checkName(obj["name"].(string)); err != nil {
			return err
		}
		raw := obj["files"].(map[string]any)
		files := make(map[string]string, len(raw))
		for p, c := range raw {
			files[p] = c.(string)
		}
		return ValidateSnippet(files)
	case CmdProposeRoomRepoApp:
		return checkName(obj["name"].(string))
	}
	return nil
}

// DecodeArgs validates args with ValidateArgs and then decodes them into v,
// a pointer to the command's *Args type.
func DecodeArgs(command string, args json.RawMessage, v any) error {
	if err := ValidateArgs(command, args); err != nil {
		return err
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	if err := json.Unmarshal(args, v); err != nil {
		return Errorf(CodeInvalidArgs, "args: %v", err)
	}
	return nil
}

// ValidateSnippet applies the server rules to a snippet's files, in this
// order, and reports the first failure (paths in byte order) as a *RuleError:
//
//  1. file-count: at most MaxSnippetFiles files;
//  2. unsafe-path: every path passes CheckPath;
//  3. path-collision: no two paths are the same file once case and Unicode
//     normalization are ignored, no two differ only in look-alike letters
//     of another script (Cyrillic "А" for Latin "A"), and no path is also
//     another's folder;
//  4. file-size, total-size: at most MaxSnippetFileBytes per file and
//     MaxSnippetTotalBytes in all;
//  5. entry-point: src/App.tsx is present, spelt exactly so.
func ValidateSnippet(files map[string]string) error {
	if len(files) > MaxSnippetFiles {
		return &RuleError{Rule: RuleFileCount, Message: fmt.Sprintf(
			"rule: too many files (%d, at most %d): the owner reviews every file of a snippet on one card; propose a pinned repository version with %s instead",
			len(files), MaxSnippetFiles, CmdProposeRoomRepoApp)}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	keys := make(map[string]string, len(paths)) // folded path -> path
	for _, p := range paths {
		if err := CheckPath(p); err != nil {
			return err
		}
		k := foldPath(p)
		if q, dup := keys[k]; dup {
			return &RuleError{Rule: RuleCollision, Path: p, Message: fmt.Sprintf(
				"rule: path %s collides with %s (the same file when case and Unicode normalization are ignored)",
				quoteN(p, MaxPathBytes), quoteN(q, MaxPathBytes))}
		}
		keys[k] = p
	}
	// Paths that differ only in look-alike letters of another script.
	looks := make(map[string]string, len(paths))
	for _, p := range paths {
		k := skeleton(p)
		if q, dup := looks[k]; dup {
			return &RuleError{Rule: RuleCollision, Path: p, Message: fmt.Sprintf(
				"rule: path %s looks like %s (letters of another script that read the same)",
				strconv.QuoteToASCII(shortenN(p, MaxPathBytes)), quoteN(q, MaxPathBytes))}
		}
		looks[k] = p
	}
	// A path that is also a folder of another path cannot be written out.
	for _, p := range paths {
		k := foldPath(p)
		for i := 0; i < len(k); i++ {
			if k[i] != '/' {
				continue
			}
			if q, ok := keys[k[:i]]; ok {
				return &RuleError{Rule: RuleCollision, Path: q, Message: fmt.Sprintf(
					"rule: path %s collides with %s (a file and a folder of the same name)",
					quoteN(q, MaxPathBytes), quoteN(p, MaxPathBytes))}
			}
		}
	}
	total := 0
	for _, p := range paths {
		n := len(files[p])
		if n > MaxSnippetFileBytes {
			return &RuleError{Rule: RuleFileSize, Path: p, Message: fmt.Sprintf(
				"rule: file %s is too large (%d bytes, at most %d per file): propose a pinned repository version with %s instead",
				quoteN(p, MaxPathBytes), n, MaxSnippetFileBytes, CmdProposeRoomRepoApp)}
		}
		total += n
	}
	if total > MaxSnippetTotalBytes {
		return &RuleError{Rule: RuleTotalSize, Message: fmt.Sprintf(
			"rule: files too large in total (%d bytes, at most %d): the owner reviews every file on one card; propose a pinned repository version with %s instead",
			total, MaxSnippetTotalBytes, CmdProposeRoomRepoApp)}
	}
	if _, ok := files[EntryPoint]; !ok {
		return &RuleError{Rule: RuleEntryPoint, Path: EntryPoint,
			Message: "rule: " + EntryPoint + " missing (the Room runtime's entry point)"}
	}
	return nil
}

// CheckPath reports whether p is a safe relative path for a snippet file: a
// path that means the same file on every OS the desktop app runs on and
// cannot leave the snippet's folder. It fails, as a *RuleError with Rule
// unsafe-path and one of these reasons, when p is
//
//   - "empty", "invalid UTF-8", or "too long" (over MaxPathBytes bytes);
//   - "absolute" (starts with '/'), or has a "drive letter" ("C:...");
//   - "backslash" anywhere (a separator on Windows);
//   - a "control character" (C0, DEL, C1: NUL included) or another
//     "non-printing character" (format characters such as bidi overrides and
//     zero-width spaces, separators other than U+0020, private use,
//     unassigned code points), which could hide a path from the reviewer;
//   - a "reserved character" on Windows: < > : " | ? *;
//   - an "empty segment" ("a//b", a trailing '/'), a "dot segment" ('.'),
//     a "dot-dot segment" ('..');
//   - a segment with a "trailing dot or space" (Windows drops them);
//   - a segment that is a "reserved name" on Windows: CON, PRN, AUX, NUL,
//     CONIN$, CONOUT$, COM0–9, LPT0–9 (and their superscript-digit forms), in
//     any case, alone or before an extension ("nul.tsx", "Com1.d.ts").
//
// The same checks then run on the path's compatibility-caseless form (see
// foldPath); a failure there has the reason suffixed "after Unicode
// normalization" (a fullwidth "．．" is ".." under NFKC). A path whose
// folded form has other separators than it ("src／x.ts") is a "look-alike
// separator"; a segment that renders blank (Hangul fillers, braille blank,
// lone combining marks) is a "blank-looking segment".
func CheckPath(p string) error {
	if reason := pathProblem(p); reason != "" {
		return unsafePath(p, reason)
	}
	if k := foldPath(p); k != p {
		if reason := pathProblem(k); reason != "" {
			return unsafePath(p, reason+" after Unicode normalization")
		}
		// A fullwidth solidus (U+FF0F) and its kin read as '/': the reviewer
		// sees folders the path does not have.
		if strings.Count(k, "/") != strings.Count(p, "/") {
			return unsafePath(p, "look-alike separator")
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		if base, _, _ := strings.Cut(seg, "."); base != "" && rendersBlank(base) {
			return unsafePath(p, "blank-looking segment")
		}
	}
	return nil
}

// rendersBlank reports a string that shows as nothing but white space:
// spaces, fillers (Hangul U+3164 and kin, braille blank U+2800) and
// combining marks with nothing to combine with.
func rendersBlank(s string) bool {
	for _, r := range s {
		switch {
		case unicode.IsSpace(r), unicode.Is(unicode.Mn, r), unicode.Is(unicode.Me, r):
		case r == 0x115F, r == 0x1160, r == 0x3164, r == 0xFFA0, r == 0x2800, r == 0x180E, r == 0x17B4, r == 0x17B5:
		default:
			return false
		}
	}
	return true
}

// confusables maps Cyrillic and Greek letters that look like Latin ones to
// those, so "src/Аpp.tsx" (Cyrillic А) and "src/App.tsx" are seen as the
// same path by the reviewer's eye. A small table of the common look-alikes,
// not all of Unicode's confusables.
var confusables = strings.NewReplacer(
	// Cyrillic
	"А", "A", "В", "B", "Е", "E", "К", "K", "М", "M", "Н", "H", "О", "O", "Р", "P", "С", "C", "Т", "T", "Х", "X",
	"Ѕ", "S", "І", "I", "Ј", "J", "Ԛ", "Q", "Ԝ", "W",
	"а", "a", "е", "e", "о", "o", "р", "p", "с", "c", "у", "y", "х", "x", "ѕ", "s", "і", "i", "ј", "j", "ԛ", "q", "ԝ", "w", "һ", "h",
	// Greek
	"Α", "A", "Β", "B", "Ε", "E", "Ζ", "Z", "Η", "H", "Ι", "I", "Κ", "K", "Μ", "M", "Ν", "N", "Ο", "O", "Ρ", "P", "Τ", "T", "Υ", "Y", "Χ", "X",
	"ο", "o", "ν", "v", "ι", "i", "κ", "k", "ρ", "p", "τ", "t", "υ", "u", "χ", "x",
)

// skeleton is the key two paths look alike on: the fold of the path with
// look-alike letters mapped to Latin.
func skeleton(p string) string { return foldPath(confusables.Replace(p)) }

func unsafePath(p, reason string) *RuleError {
	return &RuleError{Rule: RuleUnsafePath, Reason: reason, Path: p,
		Message: fmt.Sprintf("rule: unsafe path %s (%s)", quoteN(p, MaxPathBytes), reason)}
}

func pathProblem(p string) string {
	switch {
	case p == "":
		return "empty"
	case !utf8.ValidString(p):
		return "invalid UTF-8"
	case len(p) > MaxPathBytes:
		return "too long"
	case p[0] == '/':
		return "absolute"
	case len(p) >= 2 && p[1] == ':' && (p[0]|0x20 >= 'a' && p[0]|0x20 <= 'z'):
		return "drive letter"
	}
	for _, r := range p {
		switch {
		case r == '\\':
			return "backslash"
		case unicode.IsControl(r):
			return "control character"
		case r != ' ' && !unicode.IsPrint(r):
			return "non-printing character"
		case strings.ContainsRune(`<>:"|?*`, r):
			return "reserved character"
		}
	}
	for seg := range strings.SplitSeq(p, "/") {
		switch {
		case seg == "":
			return "empty segment"
		case seg == ".":
			return "dot segment"
		case seg == "..":
			return "dot-dot segment"
		case strings.HasSuffix(seg, ".") || strings.HasSuffix(seg, " "):
			return "trailing dot or space"
		case reservedName(seg):
			return "reserved name"
		}
	}
	return ""
}

// reservedName reports a Windows device name, which names the device rather
// than a file whatever extension follows it.
func reservedName(seg string) bool {
	base, _, _ := strings.Cut(seg, ".")
	base = strings.ToUpper(strings.TrimRight(base, " "))
	switch base {
	case "CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$":
		return true
	}
	if len(base) > 3 && (strings.HasPrefix(base, "COM") || strings.HasPrefix(base, "LPT")) {
		switch base[3:] {
		case "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "¹", "²", "³":
			return true
		}
	}
	return false
}

// foldPath is the key two paths collide on: Unicode's compatibility caseless
// match (The Unicode Standard, D146), NFKD(casefold(NFKD(casefold(NFD(p))))).
// It is deliberately stricter than any file system: NFC/NFD pairs collide
// (macOS), case pairs collide (Windows, macOS), and so do pairs a reviewer
// could not tell apart such as fullwidth and ASCII letters or "ß" and "ss".
// A cases.Caser keeps state, so each call makes its own.
func foldPath(p string) string {
	fold := cases.Fold()
	s := fold.String(norm.NFD.String(p))
	s = fold.String(norm.NFKD.String(s))
	return norm.NFKD.String(s)
}

// checkName refuses a proposal name the owner could not read on the card.
func checkName(name string) error {
	if strings.TrimSpace(name) == "" {
		return &RuleError{Rule: RuleName, Message: "rule: name is empty"}
	}
	if rendersBlank(name) {
		return &RuleError{Rule: RuleName, Message: "rule: name renders blank (only spaces, fillers or combining marks)"}
	}
	for i, r := range name {
		if r != ' ' && !unicode.IsPrint(r) {
			return &RuleError{Rule: RuleName, Message: fmt.Sprintf(
				"rule: name has a character that does not print (%U at byte %d)", r, i)}
		}
	}
	return nil
}
