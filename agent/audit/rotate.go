package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/roomrelay/roomrelay/internal/replace"
)

// Rotation: the current file is moved aside when it is full, the oldest
// files beyond Keep go, and the manifest records what the oldest kept file
// chains to.

// manifest records what the oldest kept file chains to.
type manifest struct {
	AnchorSeq  uint64 `json:"anchor_seq"`  // seq of the last line no longer kept
	AnchorHash string `json:"anchor_hash"` // its hash: the first kept line's prev
}

func readManifest(dir string) (manifest, error) {
	var m manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, os.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("audit: read %s: %w", ManifestFile, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("audit: %s is damaged: %w", ManifestFile, err)
	}
	return m, nil
}

func writeManifest(dir string, m manifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("audit: encode manifest: %w", err)
	}
	tmp := filepath.Join(dir, manifestTemp)
	if err := writeSynced(tmp, append(b, '\n')); err != nil {
		return fmt.Errorf("audit: write manifest: %w", err)
	}
	if err := replace.Rename(tmp, filepath.Join(dir, ManifestFile)); err != nil {
		return fmt.Errorf("audit: write manifest: %w", err)
	}
	return syncDir(dir)
}

// writeSynced writes a new file and syncs it through the handle that wrote
// it (a sync needs a handle with write access on Windows).
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type rotated struct {
	name     string
	firstSeq uint64
}

// rotatedFiles lists the rotated files, oldest first.
func rotatedFiles(dir string) ([]rotated, error) {
	names, err := filepath.Glob(filepath.Join(dir, rotatedGlob))
	if err != nil {
		return nil, fmt.Errorf("audit: list %s: %w", dir, err)
	}
	var out []rotated
	for _, n := range names {
		base := filepath.Base(n)
		num := strings.TrimSuffix(strings.TrimPrefix(base, "audit-"), ".jsonl")
		seq, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			continue // not ours
		}
		out = append(out, rotated{name: base, firstSeq: seq})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].firstSeq < out[j].firstSeq })
	return out, nil
}

func rotatedName(firstSeq uint64) string { return fmt.Sprintf("audit-%020d.jsonl", firstSeq) }

// rotate moves the current file aside and drops the oldest files beyond
// Keep. The manifest's anchor moves before a file is deleted, so a crash in
// between leaves an extra old file (ignored by Verify), never a broken chain.
func (l *Log) rotate() error {
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("audit: rotate: %w", err)
	}
	l.advanceSynced(l.lastSeq)
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("audit: rotate: %w", err)
	}
	cur := filepath.Join(l.dir, CurrentFile)
	if err := os.Rename(cur, filepath.Join(l.dir, rotatedName(l.firstSeq))); err != nil {
		return fmt.Errorf("audit: rotate: %w", err)
	}
	f, err := os.OpenFile(cur, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("audit: rotate: %w", err)
	}
	l.f, l.size, l.firstSeq = f, 0, 0
	if err := syncDir(l.dir); err != nil {
		return err
	}
	files, err := rotatedFiles(l.dir)
	if err != nil {
		return err
	}
	drop := len(files) - (l.opts.Keep - 1)
	if drop <= 0 {
		return nil
	}
	// The new oldest file's first line says what it chains to.
	lines, _, err := readLines(filepath.Join(l.dir, files[drop].name))
	if err != nil {
		return err
	}
	if len(lines) == 0 {
		return fmt.Errorf("audit: rotate: %s is empty", files[drop].name)
	}
	first, _, ok := parseLine(lines[0])
	if !ok {
		return fmt.Errorf("audit: rotate: first line of %s is damaged", files[drop].name)
	}
	if err := writeManifest(l.dir, manifest{AnchorSeq: first.Seq - 1, AnchorHash: first.Prev}); err != nil {
		return err
	}
	for _, old := range files[:drop] {
		if err := os.Remove(filepath.Join(l.dir, old.name)); err != nil {
			return fmt.Errorf("audit: rotate: drop %s: %w", old.name, err)
		}
		l.log.Info("audit: dropped old log file", "file", old.name)
	}
	return nil
}
