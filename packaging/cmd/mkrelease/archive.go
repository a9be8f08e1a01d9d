package main

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The archives are reproducible for the same inputs: entries sorted, one
// fixed time, no owner names; executables 0755, the rest 0644.

// epoch is every entry's modification time (2000-01-01: zip's DOS time
// cannot hold 1970).
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// entries lists the files under stage/base, sorted, as slash paths
// starting with base/.
func entries(stage, base string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(filepath.Join(stage, base), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(stage, p)
		out = append(out, filepath.ToSlash(rel))
		return err
	})
	sort.Strings(out)
	return out, err
}

// isExecutable names the files that are programs in a release.
func isExecutable(name string) bool {
	b := filepath.Base(name)
	return strings.HasSuffix(b, ".exe") || b == "roomrelay" || b == "roomrelay-sandbox"
}

// entryMode is an archive entry's mode: 0755 for programs, else 0644.
func entryMode(name string) fs.FileMode {
	if isExecutable(name) {
		return 0o755
	}
	return 0o644
}

// writeTarGz packs stage/base into a gzipped tar with base/ as its top
// directory.
func writeTarGz(out, stage, base string) (err error) {
	names, err := entries(stage, base)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: base + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	for _, name := range names {
		src, err := os.Open(filepath.Join(stage, filepath.FromSlash(name)))
		if err != nil {
			return err
		}
		fi, err := src.Stat()
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: fi.Size(), Mode: int64(entryMode(name)), ModTime: epoch, Format: tar.FormatPAX})
		}
		if err == nil {
			_, err = io.Copy(tw, src)
		}
		src.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

// writeZip packs stage/base into a zip with base/ as its top directory.
func writeZip(out, stage, base string) (err error) {
	names, err := entries(stage, base)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	zw := zip.NewWriter(f)
	for _, name := range names {
		h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: epoch}
		h.SetMode(entryMode(name))
		w, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		src, err := os.Open(filepath.Join(stage, filepath.FromSlash(name)))
		if err != nil {
			return err
		}
		_, err = io.Copy(w, src)
		src.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return zw.Close()
}

// writeSums writes sha256sum's format ("HASH  NAME") for files, by base
// name: `sha256sum -c SHA256SUMS` in the output dir checks them.
func writeSums(out string, files []string) error {
	var b strings.Builder
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(h.Sum(nil)), filepath.Base(name))
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
