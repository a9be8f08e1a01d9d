package main

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// stageFiles makes stage/base with the files a release holds.
func stageFiles(t *testing.T, base string, names ...string) string {
	t.Helper()
	stage := t.TempDir()
	for _, n := range names {
		p := filepath.Join(stage, base, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("content of "+n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return stage
}

func TestTarGzHoldsTheRelease(t *testing.T) {
	base := "roomrelay_1.2.3_darwin_arm64"
	stage := stageFiles(t, base, "roomrelay", "roomrelay-sandbox", "README.md", "LICENSE")
	out := filepath.Join(t.TempDir(), base+".tar.gz")
	if err := writeTarGz(out, stage, base); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	modes := map[string]int64{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeReg && string(b) != "content of "+strings.TrimPrefix(h.Name, base+"/") {
			t.Errorf("%s holds %q", h.Name, b)
		}
		modes[h.Name] = h.Mode
	}
	want := map[string]int64{base + "/": 0o755, base + "/roomrelay": 0o755, base + "/roomrelay-sandbox": 0o755, base + "/README.md": 0o644, base + "/LICENSE": 0o644}
	if len(modes) != len(want) {
		t.Errorf("entries %v, want %v", modes, want)
	}
	for n, m := range want {
		if modes[n] != m {
			t.Errorf("%s: mode %o, want %o", n, modes[n], m)
		}
	}
}

func TestZipHoldsTheRelease(t *testing.T) {
	base := "roomrelay_1.2.3_windows_amd64"
	stage := stageFiles(t, base, "roomrelay.exe", "roomrelay-sandbox.exe", "LICENSE")
	out := filepath.Join(t.TempDir(), base+".zip")
	if err := writeZip(out, stage, base); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(out)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "content of "+strings.TrimPrefix(f.Name, base+"/") {
			t.Errorf("%s holds %q", f.Name, b)
		}
	}
	if want := []string{base + "/LICENSE", base + "/roomrelay-sandbox.exe", base + "/roomrelay.exe"}; !slices.Equal(names, want) {
		t.Errorf("zip entries %q, want %q", names, want)
	}
}

func TestSumsAreSha256sumFormat(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.zip")
	if err := os.WriteFile(a, []byte("zip bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	sums := filepath.Join(dir, "SHA256SUMS")
	if err := writeSums(sums, []string{a}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(sums)
	h := sha256.Sum256([]byte("zip bytes"))
	if want := hex.EncodeToString(h[:]) + "  a.zip\n"; string(got) != want {
		t.Errorf("SHA256SUMS %q, want %q", got, want)
	}
}
