package relay

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// contentHashDoc is the byte-level specification other languages implement.
const contentHashDoc = "../docs/content-hash.md"

// docBlock is the fenced block that follows marker in doc.
func docBlock(t *testing.T, doc, marker string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "<!-- "+marker+" -->\n```")
	if !ok {
		t.Fatalf("%s has no block after <!-- %s -->", contentHashDoc, marker)
	}
	_, rest, _ = strings.Cut(rest, "\n") // the fence's info string
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("%s: the block after <!-- %s --> is not closed", contentHashDoc, marker)
	}
	return block
}

// TestContentHashDocVectors (#28 §1.7): the specification's worked example
// and test vectors are what ContentHash computes, the vectors are the
// golden file's (which clients/ts checks its contentHash against), and they
// cover NFC and NFD names, astral characters and CRLF.
func TestContentHashDocVectors(t *testing.T) {
	b, err := os.ReadFile(contentHashDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)

	// The worked example: canonical bytes (a JSON string, then hex), hash.
	ex := strings.Fields(docBlock(t, doc, "content-hash-example"))
	if len(ex) != 3 {
		t.Fatalf("the worked example has %d lines, want the bytes as JSON, as hex, and the hash", len(ex))
	}
	files := map[string]string{"src/App.tsx": "hi\r\n", "README.md": "caf\u00e9"}
	canon := appendFiles(netstring(nil, "roomrelay-files-v1"), files)
	var asText string
	if err := json.Unmarshal([]byte(ex[0]), &asText); err != nil {
		t.Fatalf("worked example bytes %s: %v", ex[0], err)
	}
	raw := make([]byte, 0, len(asText))
	for _, r := range asText { // each \u00XX is one byte
		raw = append(raw, byte(r))
	}
	if string(raw) != string(canon) {
		t.Errorf("worked example bytes %q, ContentHash encodes %q", raw, canon)
	}
	if want := ex[1]; want != hex.EncodeToString(canon) {
		t.Errorf("worked example hex %s, want %s", want, hex.EncodeToString(canon))
	}
	if ex[2] != ContentHash(files) {
		t.Errorf("worked example hash %s, ContentHash gives %s", ex[2], ContentHash(files))
	}

	// The vectors.
	var vs []contentHashVector
	if err := json.Unmarshal([]byte(docBlock(t, doc, "content-hash-vectors")), &vs); err != nil {
		t.Fatalf("the vectors block: %v", err)
	}
	golden := map[string]contentHashVector{}
	for _, v := range buildContentHashGolden().Vectors {
		golden[v.Name] = v
	}
	covered := map[string]bool{}
	for _, v := range vs {
		if h := ContentHash(v.Files); h != v.ContentHash {
			t.Errorf("vector %q: the doc says %s, ContentHash gives %s", v.Name, v.ContentHash, h)
		}
		g, ok := golden[v.Name]
		if !ok || g.ContentHash != v.ContentHash || strings.Join(g.SortedPaths, "\x00") != strings.Join(v.SortedPaths, "\x00") {
			t.Errorf("vector %q is not the golden file's (clients/ts would not check it)", v.Name)
		}
		for _, c := range []string{"NFC", "NFD", "astral", "CRLF"} {
			if strings.Contains(v.Name, c) {
				covered[c] = true
			}
		}
	}
	for _, c := range []string{"NFC", "NFD", "astral", "CRLF"} {
		if !covered[c] {
			t.Errorf("no vector for %s in %s", c, contentHashDoc)
		}
	}
}
