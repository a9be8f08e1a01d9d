package relay

import (
	"encoding/json"
	"os"
	"regexp"
	"testing"
)

// The golden vectors were computed by testdata/idemkey_ref.py, an
// independent implementation written from SnippetKey's doc comment, so this
// test pins the documented encoding rather than the Go code's own output.
type idemGolden struct {
	Snippets []struct {
		RoomID      string            `json:"room_id"`
		Name        string            `json:"name"`
		Files       map[string]string `json:"files"`
		Canonical   string            `json:"canonical"`
		Key         string            `json:"key"`
		ContentHash string            `json:"content_hash"`
	} `json:"snippets"`
	Repos []struct {
		RoomID       string `json:"room_id"`
		Name         string `json:"name"`
		RepositoryID string `json:"repository_id"`
		VersionID    string `json:"version_id"`
		Key          string `json:"key"`
	} `json:"repos"`
}

func TestIdempotencyKeyGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/idemkey.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g idemGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Snippets) < 5 || len(g.Repos) < 2 {
		t.Fatalf("golden file has %d snippet and %d repo vectors", len(g.Snippets), len(g.Repos))
	}
	keyRE := regexp.MustCompile(`^(snip|repo)-[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for i, v := range g.Snippets {
		if got := string(CanonicalSnippet(v.RoomID, v.Name, v.Files)); got != v.Canonical {
			t.Errorf("vector %d: canonical\n got %q\nwant %q", i, got, v.Canonical)
		}
		// Maps iterate in random order: repeat to catch order dependence.
		for range 20 {
			if got := SnippetKey(v.RoomID, v.Name, v.Files); got != v.Key {
				t.Fatalf("vector %d: key %s, want %s", i, got, v.Key)
			}
		}
		if got := ContentHash(v.Files); got != v.ContentHash {
			t.Errorf("vector %d: content hash %s, want %s", i, got, v.ContentHash)
		}
		if !keyRE.MatchString(v.Key) || seen[v.Key] {
			t.Errorf("vector %d: key %s malformed or repeated", i, v.Key)
		}
		seen[v.Key] = true
	}
	for i, v := range g.Repos {
		if got := RepoKey(v.RoomID, v.Name, v.RepositoryID, v.VersionID); got != v.Key {
			t.Errorf("repo vector %d: key %s, want %s", i, got, v.Key)
		}
		if !keyRE.MatchString(v.Key) || seen[v.Key] {
			t.Errorf("repo vector %d: key %s malformed or repeated", i, v.Key)
		}
		seen[v.Key] = true
	}
}

// TestCanonicalDocExample keeps the example in SnippetKey's doc true.
func TestCanonicalDocExample(t *testing.T) {
	got := string(CanonicalSnippet("r1", "Timer", map[string]string{"src/App.tsx": "x"}))
	if want := "20:roomrelay-snippet-v1,2:r1,5:Timer,1:1,11:src/App.tsx,1:x,"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestKeysSeparateWhatDiffers(t *testing.T) {
	files := map[string]string{"src/App.tsx": "a", "src/b.ts": "b"}
	base := SnippetKey("r", "n", files)
	variants := map[string]string{
		"room":          SnippetKey("r2", "n", files),
		"name":          SnippetKey("r", "n2", files),
		"content":       SnippetKey("r", "n", map[string]string{"src/App.tsx": "a", "src/b.ts": "b "}),
		"path":          SnippetKey("r", "n", map[string]string{"src/App.tsx": "a", "src/c.ts": "b"}),
		"moved content": SnippetKey("r", "n", map[string]string{"src/App.tsx": "ab", "src/b.ts": ""}),
		"fewer files":   SnippetKey("r", "n", map[string]string{"src/App.tsx": "a"}),
		"shifted field": SnippetKey("", "rn", files),
	}
	for what, k := range variants {
		if k == base {
			t.Errorf("changing the %s keeps the key %s", what, k)
		}
	}
	// The content hash binds the files only.
	if ContentHash(files) != ContentHash(map[string]string{"src/b.ts": "b", "src/App.tsx": "a"}) {
		t.Error("content hash depends on map order")
	}
	if ContentHash(files) == ContentHash(map[string]string{"src/App.tsx": "a", "src/b.ts": "c"}) {
		t.Error("content hash ignores a content change")
	}
	if RepoKey("r", "n", "repo", "v1") == RepoKey("r", "n", "repo", "v2") {
		t.Error("repo key ignores the version")
	}
	if RepoKey("r", "n", "ab", "c") == RepoKey("r", "n", "a", "bc") {
		t.Error("repo key is ambiguous")
	}
}

// TestDerivedKeyPassesSchema: a derived key meets the schema's 8–128 bounds.
func TestDerivedKeyPassesSchema(t *testing.T) {
	files := map[string]any{"src/App.tsx": "x"}
	args := snippetArgs(t, func(m map[string]any) {
		m["files"] = files
		m["idempotency_key"] = SnippetKey("room-1", "Standup timer", map[string]string{"src/App.tsx": "x"})
	})
	if err := ValidateArgs(CmdProposeRoomSnippetApp, args); err != nil {
		t.Fatal(err)
	}
}
