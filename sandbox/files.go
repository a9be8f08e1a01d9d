package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Bounds for ReadSnippetDir: a snippet is a handful of small files, so a
// directory far beyond that is a mistake (a project root, node_modules).
const (
	maxDirFiles = 200
	maxDirBytes = 4 << 20
)

// ReadSnippetDir reads a snippet directory into a file map keyed by
// slash-separated paths relative to dir (e.g. "src/App.tsx"). Hidden
// entries and node_modules are skipped; symlinks are not followed.
func ReadSnippetDir(dir string) (map[string]string, error) {
	files := map[string]string{}
	total := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if p != dir && (strings.HasPrefix(name, ".") || name == "node_modules") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		total += len(b)
		if len(files) >= maxDirFiles || total > maxDirBytes {
			return fmt.Errorf("%s holds more than %d files or %d bytes: not a snippet directory", dir, maxDirFiles, maxDirBytes)
		}
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read snippet: %w", err)
	}
	return files, nil
}
