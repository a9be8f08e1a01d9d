// Command mkrelease builds the device binaries for macOS and Windows and
// packs the release archives a user downloads:
//
//	go run ./packaging/cmd/mkrelease [-version 1.2.3] [-out dist] [-targets darwin/amd64,darwin/arm64,windows/amd64] [-msi auto|required|none]
//
// Each target gets roomrelay_VERSION_OS_ARCH.tar.gz (macOS) or .zip
// (Windows) holding one directory with the device binary (roomrelay, built
// from ./cmd/roomrelay-agent), its sandbox worker (roomrelay-sandbox, which
// the agent finds next to itself), README.md, LICENSE and install.md. For
// windows/amd64 it also builds roomrelay_VERSION_windows_amd64.msi, a
// per-user installer, with wixl (Debian's wixl package; -msi auto skips it
// with a warning when wixl is missing). SHA256SUMS lists every file in
// sha256sum's format. The printed lines are the files written.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/roomrelay/roomrelay/packaging"
)

type options struct {
	version, out, msi string
	targets           []string
}

func main() {
	var o options
	var targets string
	flag.StringVar(&o.version, "version", "", "release version (default: from git describe, or 0.0.0-dev)")
	flag.StringVar(&o.out, "out", "dist", "output `dir`")
	flag.StringVar(&targets, "targets", "darwin/amd64,darwin/arm64,windows/amd64", "comma-separated GOOS/GOARCH list")
	flag.StringVar(&o.msi, "msi", "auto", "build the Windows .msi with wixl: auto (if wixl is installed), required, none")
	flag.Parse()
	o.targets = strings.Split(targets, ",")

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, log, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkrelease:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, o options) error {
	switch o.msi {
	case "auto", "required", "none":
	default:
		return fmt.Errorf("-msi %q: want auto, required or none", o.msi)
	}
	root, err := goOutput(ctx, "", nil, "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		return fmt.Errorf("find the module root: %w", err)
	}
	if o.version == "" {
		o.version = gitVersion(ctx, root)
	}
	stage, err := os.MkdirTemp("", "roomrelay-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	var written []string
	for _, t := range o.targets {
		goos, goarch, ok := strings.Cut(t, "/")
		if !ok || (goos != "darwin" && goos != "windows") || (goarch != "amd64" && goarch != "arm64") {
			return fmt.Errorf("target %q: want darwin/amd64, darwin/arm64, windows/amd64 or windows/arm64", t)
		}
		base := fmt.Sprintf("roomrelay_%s_%s_%s", o.version, goos, goarch)
		dir := filepath.Join(stage, base)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		exe := map[string]string{"windows": ".exe"}[goos]
		env := []string{"GOOS=" + goos, "GOARCH=" + goarch, "CGO_ENABLED=0"}
		log.Info("building", "target", t)
		if _, err := goOutput(ctx, root, env, "build", "-trimpath", "-buildvcs=false",
			"-ldflags", "-s -w -X github.com/roomrelay/roomrelay/cli.Version="+o.version,
			"-o", filepath.Join(dir, "roomrelay"+exe), "./cmd/roomrelay-agent"); err != nil {
			return err
		}
		if _, err := goOutput(ctx, root, env, "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w",
			"-o", filepath.Join(dir, "roomrelay-sandbox"+exe), "./cmd/roomrelay-sandbox"); err != nil {
			return err
		}
		for dst, src := range map[string]string{"README.md": "README.md", "LICENSE": "LICENSE", "install.md": "docs/install.md"} {
			if err := copyFile(filepath.Join(root, src), filepath.Join(dir, dst)); err != nil {
				return err
			}
		}
		var archive string
		if goos == "windows" {
			archive = filepath.Join(o.out, base+".zip")
			err = writeZip(archive, stage, base)
		} else {
			archive = filepath.Join(o.out, base+".tar.gz")
			err = writeTarGz(archive, stage, base)
		}
		if err != nil {
			return fmt.Errorf("pack %s: %w", t, err)
		}
		written = append(written, archive)
		if goos == "windows" && goarch == "amd64" && o.msi != "none" {
			msi, err := buildMSI(ctx, log, o, dir, filepath.Join(o.out, base+".msi"))
			if err != nil {
				return err
			}
			if msi != "" {
				written = append(written, msi)
			}
		}
	}
	sums := filepath.Join(o.out, "SHA256SUMS")
	if err := writeSums(sums, written); err != nil {
		return err
	}
	for _, f := range append(written, sums) {
		fmt.Println(f)
	}
	return nil
}

// buildMSI runs wixl over the rendered WiX source in dir (where the
// binaries are: wixl takes relative sources only). It returns "" when -msi
// auto finds no wixl.
func buildMSI(ctx context.Context, log *slog.Logger, o options, dir, out string) (string, error) {
	wixl, err := exec.LookPath("wixl")
	if err != nil {
		if o.msi == "required" {
			return "", errors.New("-msi required: wixl is not installed (Debian: apt-get install wixl)")
		}
		log.Warn("no wixl: the .msi is left out (Debian: apt-get install wixl)")
		return "", nil
	}
	src, err := packaging.WindowsMSISource(packaging.MSIParams{Version: o.version, Exe: "roomrelay.exe", Worker: "roomrelay-sandbox.exe"})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "roomrelay.wxs"), []byte(src), 0o644); err != nil {
		return "", err
	}
	defer os.Remove(filepath.Join(dir, "roomrelay.wxs"))
	abs, err := filepath.Abs(out)
	if err != nil {
		return "", err
	}
	log.Info("building the per-user installer (wixl)", "msi", out)
	cmd := exec.CommandContext(ctx, wixl, "-a", "x64", "-o", abs, "roomrelay.wxs")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("wixl: %s: %w", strings.TrimSpace(string(b)), err)
	}
	return out, nil
}

// goOutput runs the go command in dir with env added and returns its
// trimmed stdout; stderr goes to ours.
func goOutput(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir, cmd.Stderr = dir, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(b)), nil
}

func gitVersion(ctx context.Context, root string) string {
	cmd := exec.CommandContext(ctx, "git", "describe", "--tags", "--match", "v[0-9]*")
	cmd.Dir = root
	if b, err := cmd.Output(); err == nil {
		return strings.TrimPrefix(strings.TrimSpace(string(b)), "v")
	}
	return "0.0.0-dev"
}
