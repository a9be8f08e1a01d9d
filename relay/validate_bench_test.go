package relay

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchProposal builds a snippet proposal of n files about the seed's sizes
// (the standup timer: src/App.tsx 2021 B and src/styles.css 1046 B).
// With 21 files it exceeds the file-count limit, so that figure is the cost
// of a refusal after the full schema pass and the count check.
func benchProposal(b *testing.B, n int) json.RawMessage {
	files := map[string]string{"src/App.tsx": strings.Repeat("const x = <div>timer</div>;\n", 72)}
	for i := 1; i < n; i++ {
		files[fmt.Sprintf("src/components/Part%02d.tsx", i)] = strings.Repeat("export const y = 1; // part\n", 38)
	}
	raw, err := json.Marshal(map[string]any{
		"room_id": "room-1", "name": "Standup timer", "files": files,
		"idempotency_key": SnippetKey("room-1", "Standup timer", files),
	})
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

func BenchmarkValidate(b *testing.B) {
	for _, n := range []int{2, 6, 21} {
		raw := benchProposal(b, n)
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				err := ValidateArgs(CmdProposeRoomSnippetApp, raw)
				if (err == nil) != (n <= MaxSnippetFiles) {
					b.Fatalf("files=%d: %v", n, err)
				}
			}
		})
	}
	// The rules alone, with the limit lifted by validating 21 safe paths.
	b.Run("paths=21", func(b *testing.B) {
		var paths []string
		for i := range 21 {
			paths = append(paths, fmt.Sprintf("src/components/Part%02d.tsx", i))
		}
		b.ReportAllocs()
		for b.Loop() {
			for _, p := range paths {
				if err := CheckPath(p); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

func BenchmarkSnippetKey(b *testing.B) {
	files := map[string]string{"src/App.tsx": strings.Repeat("x", 2021), "src/styles.css": strings.Repeat("y", 1046)}
	b.ReportAllocs()
	for b.Loop() {
		SnippetKey("room-1", "Standup timer", files)
	}
}
