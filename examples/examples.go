// Package examples embeds the example snippet apps, so the demo and tests
// can use them from any working directory (and from an installed binary).
package examples

import (
	"embed"
	"io/fs"
	"path"
)

//go:embed standup-timer/src
var snippets embed.FS

// StandupTimer returns the seed's example app: src/App.tsx and src/styles.css.
func StandupTimer() map[string]string {
	files := map[string]string{}
	root := "standup-timer"
	err := fs.WalkDir(snippets, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := snippets.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := relPath(root, p)
		files[rel] = string(b)
		return nil
	})
	if err != nil {
		panic("examples: embedded files unreadable: " + err.Error())
	}
	return files
}

func relPath(root, p string) (string, bool) {
	if len(p) > len(root) && p[:len(root)] == root && p[len(root)] == '/' {
		return path.Clean(p[len(root)+1:]), true
	}
	return p, false
}
