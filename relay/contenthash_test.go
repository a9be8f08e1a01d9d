package relay

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"sort"
	"strings"
	"testing"
	"unicode/utf16"
)

var updateContentHash = flag.Bool("update", false, "rewrite testdata/contenthash.golden.json from ContentHash")

// contentHashGoldenPath is the corpus that pins ContentHash for other
// implementations: clients/ts (node --test) checks its contentHash against
// the same file, so the TypeScript client and Go agree byte for byte.
const contentHashGoldenPath = "testdata/contenthash.golden.json"

type contentHashVector struct {
	Name  string            `json:"name"`
	Files map[string]string `json:"files"`
	// SortedPaths is the order the encoding uses (UTF-8 byte order), so a
	// client that disagrees can see where.
	SortedPaths []string `json:"sorted_paths"`
	ContentHash string   `json:"content_hash"`
}

type contentHashGolden struct {
	Comment string              `json:"comment"`
	Vectors []contentHashVector `json:"vectors"`
}

// contentHashCorpus is the parity corpus: the cases where a reimplementation
// is likely to differ (UTF-16 vs UTF-8 order, NFC vs NFD, byte vs character
// lengths, the netstring delimiters inside strings, empty strings).
func contentHashCorpus() []contentHashVector {
	many := map[string]string{}
	for _, n := range []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"} {
		many["f"+n+".ts"] = "export const n = " + n + "\n"
	}
	return []contentHashVector{
		{Name: "empty set", Files: map[string]string{}},
		{Name: "one empty file", Files: map[string]string{"src/App.tsx": ""}},
		{Name: "empty path", Files: map[string]string{"": "x"}},
		{Name: "ascii order", Files: map[string]string{"b": "1", "a": "2", "A": "3", "a/b": "4", "a-b": "5", "a.b": "6", "a b": "7"}},
		{Name: "netstring delimiters inside", Files: map[string]string{"1:a,": "1:x,", "src/,:.ts": "0:,"}},
		{Name: "twelve files (count 12, 10 before 2)", Files: many},
		{Name: "CRLF line ends (hashed as they are)", Files: map[string]string{"src/App.tsx": "export default function App() {\r\n  return null\r\n}\r\n"}},
		{Name: "LF line ends (the same file with LF: another hash)", Files: map[string]string{"src/App.tsx": "export default function App() {\n  return null\n}\n"}},
		{Name: "non-ascii content (bytes, not characters)", Files: map[string]string{"src/App.tsx": "// é ☕ 😀 \u202e bidi\r\n\x00end"}},
		{Name: "NFC name", Files: map[string]string{"src/caf\u00e9.ts": "1"}},
		{Name: "NFD name", Files: map[string]string{"src/cafe\u0301.ts": "1"}},
		{Name: "NFC and NFD side by side", Files: map[string]string{"src/caf\u00e9.ts": "nfc", "src/cafe\u0301.ts": "nfd", "src/cafe.ts": "plain"}},
		{Name: "Hangul NFC and NFD", Files: map[string]string{"\ud55c.md": "a", "\u1112\u1161\u11ab.md": "b"}},
		{Name: "astral plane vs high BMP (UTF-16 order differs)", Files: map[string]string{
			"src/\U0001F600.ts": "3", "src/\uff41.ts": "4", "src/\ue000.ts": "5", "src/\ufffd.ts": "6", "src/Z.ts": "7", "src/\U00010000.ts": "8"}},
		{Name: "astral content and name", Files: map[string]string{"\U0001D11E/\U0001F3B5.txt": "\U0001F3B5\U0001D11E", "z": "\U0010FFFF"}},
		{Name: "a long file", Files: map[string]string{"big.txt": strings.Repeat("roomrelay ", 1000) + "é"}},
		{Name: "mixed", Files: map[string]string{
			"src/App.tsx":    "export default function App() {\n  return <div className=\"timer\">15:00</div>\n}\n",
			"src/styles.css": ".timer { font-size: 4rem; }\n", "README.md": "# Ünïcode ☕\n"}},
	}
}

func buildContentHashGolden() contentHashGolden {
	g := contentHashGolden{Comment: "Produced by relay.ContentHash (go test ./relay -run TestContentHashGolden -update); checked by that test and by clients/ts (node --test)."}
	for _, v := range contentHashCorpus() {
		for p := range v.Files {
			v.SortedPaths = append(v.SortedPaths, p)
		}
		sort.Strings(v.SortedPaths)
		if v.SortedPaths == nil {
			v.SortedPaths = []string{}
		}
		v.ContentHash = ContentHash(v.Files)
		g.Vectors = append(g.Vectors, v)
	}
	return g
}

func encodeGolden(g contentHashGolden) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	err := enc.Encode(g)
	return buf.Bytes(), err
}

// TestContentHashGolden fails when the fixture and ContentHash disagree, so
// the file the TypeScript client is tested against is always Go's truth.
func TestContentHashGolden(t *testing.T) {
	want := buildContentHashGolden()
	b, err := encodeGolden(want)
	if err != nil {
		t.Fatal(err)
	}
	if *updateContentHash {
		if err := os.WriteFile(contentHashGoldenPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	disk, err := os.ReadFile(contentHashGoldenPath)
	if err != nil {
		t.Fatalf("%v (run go test ./relay -run TestContentHashGolden -update to create it)", err)
	}
	var got contentHashGolden
	if err := json.Unmarshal(disk, &got); err != nil {
		t.Fatalf("%s: %v", contentHashGoldenPath, err)
	}
	if len(got.Vectors) != len(want.Vectors) {
		t.Fatalf("%s has %d vectors, the corpus %d (run with -update if the corpus changed)", contentHashGoldenPath, len(got.Vectors), len(want.Vectors))
	}
	for i, v := range got.Vectors {
		// The file's own files, hashed now: the fixture's hash must be Go's.
		if h := ContentHash(v.Files); h != v.ContentHash {
			t.Errorf("vector %d (%s): fixture says %s, ContentHash gives %s", i, v.Name, v.ContentHash, h)
		}
		if v.ContentHash != want.Vectors[i].ContentHash || v.Name != want.Vectors[i].Name {
			t.Errorf("vector %d (%s) differs from the corpus in code (run with -update if the corpus changed)", i, v.Name)
		}
		sorted := append([]string(nil), v.SortedPaths...)
		sort.Strings(sorted)
		if strings.Join(sorted, "\x00") != strings.Join(v.SortedPaths, "\x00") || len(v.SortedPaths) != len(v.Files) {
			t.Errorf("vector %d (%s): sorted_paths is not the files' paths in byte order", i, v.Name)
		}
	}
	if !bytes.Equal(disk, b) {
		t.Errorf("%s is not what the corpus encodes to (run with -update)", contentHashGoldenPath)
	}
}

// TestContentHashCorpusCoversUTF16Order keeps the corpus honest: at least one
// vector sorts differently by UTF-16 code units (JavaScript's default sort)
// than by UTF-8 bytes, and one holds an NFC and an NFD spelling of a name.
func TestContentHashCorpusCoversUTF16Order(t *testing.T) {
	var utf16Differs, nfBoth bool
	for _, v := range buildContentHashGolden().Vectors {
		js := append([]string(nil), v.SortedPaths...)
		sort.Slice(js, func(i, j int) bool { return lessUTF16(js[i], js[j]) })
		if strings.Join(js, "\x00") != strings.Join(v.SortedPaths, "\x00") {
			utf16Differs = true
		}
		if _, ok := v.Files["src/caf\u00e9.ts"]; ok {
			if _, ok := v.Files["src/cafe\u0301.ts"]; ok {
				nfBoth = true
			}
		}
	}
	if !utf16Differs || !nfBoth {
		t.Fatalf("corpus lacks a UTF-16 order case (%v) or an NFC+NFD pair (%v)", utf16Differs, nfBoth)
	}
}

func lessUTF16(a, b string) bool {
	x, y := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(x) && i < len(y); i++ {
		if x[i] != y[i] {
			return x[i] < y[i]
		}
	}
	return len(x) < len(y)
}
