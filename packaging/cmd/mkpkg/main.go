// Command mkpkg builds roomrelay for Linux and packs it into a .deb and an
// .rpm with the nfpm library:
//
//	go run ./packaging/cmd/mkpkg [-version 1.2.3] [-arch amd64] [-out dist]
//
// The packages hold the binary (/usr/bin/roomrelay), the systemd user unit
// (/usr/lib/systemd/user/roomrelay.service), README, install notes, LICENSE
// and a Debian copyright file (/usr/share/doc/roomrelay), the manual page
// and bash, zsh and fish completions generated from the command table, and,
// unless -runtime=none, the sandbox's
// pinned React runtime tarballs (/usr/share/roomrelay/jsruntime), fetched and
// integrity-checked by the sandbox package itself. With -runtime=auto (the
// default) a failed fetch (offline build) leaves the runtime out with a
// warning; the agent then fetches it into the user's cache on first use.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager

	"github.com/roomrelay/roomrelay/packaging"
	"github.com/roomrelay/roomrelay/sandbox"
)

type options struct {
	version, arch, out, runtime, cacheDir, registry string
	formats                                         []string
}

func main() {
	var o options
	var formats string
	flag.StringVar(&o.version, "version", "", "package version (default: from git describe, or 0.0.0-dev)")
	flag.StringVar(&o.arch, "arch", "amd64", "GOARCH to build for: amd64 or arm64")
	flag.StringVar(&o.out, "out", "dist", "output `dir`")
	flag.StringVar(&formats, "formats", "deb,rpm", "comma-separated package formats")
	flag.StringVar(&o.runtime, "runtime", "auto", "ship the sandbox's React runtime: auto (if it can be fetched), required, none")
	flag.StringVar(&o.cacheDir, "cache-dir", "", "where the runtime is fetched to (default: roomrelay's user cache dir)")
	flag.StringVar(&o.registry, "registry", os.Getenv("npm_config_registry"), "npm registry `url` for the runtime (env npm_config_registry)")
	flag.Parse()
	o.formats = strings.Split(formats, ",")

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, log, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkpkg:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, o options) error {
	switch o.runtime {
	case "auto", "required", "none":
	default:
		return fmt.Errorf("-runtime %q: want auto, required or none", o.runtime)
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	if o.version == "" {
		o.version = gitVersion(ctx, root)
	}
	stage, err := os.MkdirTemp("", "roomrelay-pkg-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)

	goBuild := func(out, pkg string, flags ...string) error {
		args := append([]string{"build", "-trimpath", "-buildvcs=false"}, flags...)
		cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, pkg)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+o.arch, "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build %s: %w", pkg, err)
		}
		return nil
	}
	bin := filepath.Join(stage, "roomrelay")
	log.Info("building the device binary (go build ./cmd/roomrelay-agent)", "version", o.version, "arch", o.arch)
	// The device binary does not import cli/hubcmd: the hub and the demo
	// (and with them nats-server) stay out of what a laptop installs; see
	// cmd/roomrelay-agent.
	if err := goBuild(bin, "./cmd/roomrelay-agent",
		"-ldflags", "-s -w -X github.com/roomrelay/roomrelay/cli.Version="+o.version); err != nil {
		return err
	}
	// The device binary's sandbox worker (esbuild and goja live only here).
	log.Info("building the sandbox worker (go build ./cmd/roomrelay-sandbox)")
	worker := filepath.Join(stage, "roomrelay-sandbox")
	if err := goBuild(worker, "./cmd/roomrelay-sandbox", "-ldflags", "-s -w"); err != nil {
		return err
	}

	// The manual page and completions come from the device build's own
	// command table (built for this machine, so it can run here).
	log.Info("generating the manual page and shell completions from the command table")
	generated, err := generateDocs(ctx, root, stage, o.version)
	if err != nil {
		return err
	}
	copyright := filepath.Join(stage, "copyright")
	if err := os.WriteFile(copyright, []byte(debianCopyright), 0o644); err != nil {
		return err
	}

	log.Info("staging the React runtime", "mode", o.runtime)
	runtimeFiles, err := stageRuntime(ctx, log, o, filepath.Join(stage, "jsruntime"))
	if err != nil {
		return err
	}
	unit, err := packaging.PackagedUserUnit(len(runtimeFiles) > 0)
	if err != nil {
		return err
	}
	unitPath := filepath.Join(stage, "roomrelay.service")
	if err := os.WriteFile(unitPath, []byte(unit), 0o644); err != nil {
		return err
	}

	for _, name := range []string{"README.md", "LICENSE", "docs/install.md"} {
		if _, err := os.Stat(filepath.Join(root, name)); err != nil {
			return fmt.Errorf("%s is needed in the package: %w", name, err)
		}
	}
	contents := files.Contents{
		{Source: bin, Destination: packaging.PkgBinary, FileInfo: &files.ContentFileInfo{Mode: 0o755}},
		{Source: worker, Destination: pkgWorker, FileInfo: &files.ContentFileInfo{Mode: 0o755}},
		{Source: unitPath, Destination: packaging.PkgUserUnit, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
		{Source: filepath.Join(root, "README.md"), Destination: packaging.PkgDocDir + "/README.md", Type: files.TypeFile, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
		{Source: filepath.Join(root, "docs/install.md"), Destination: packaging.PkgDocDir + "/install.md", Type: files.TypeFile, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
		{Source: filepath.Join(root, "LICENSE"), Destination: packaging.PkgDocDir + "/LICENSE", Type: files.TypeFile, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
	}
	contents = append(contents, &files.Content{Source: copyright, Destination: packaging.PkgDocDir + "/copyright", FileInfo: &files.ContentFileInfo{Mode: 0o644}})
	for dst, src := range generated {
		contents = append(contents, &files.Content{Source: src, Destination: dst, FileInfo: &files.ContentFileInfo{Mode: 0o644}})
	}
	for _, f := range runtimeFiles {
		contents = append(contents, &files.Content{Source: f, Destination: packaging.PkgRuntimeDir + "/" + filepath.Base(f), FileInfo: &files.ContentFileInfo{Mode: 0o644}})
	}

	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	for _, format := range o.formats {
		path := filepath.Join(o.out, fmt.Sprintf("roomrelay_%s_%s.%s", o.version, o.arch, format))
		log.Info("packing", "format", format)
		if err := pack(format, path, info(o, contents)); err != nil {
			return fmt.Errorf("%s: %w", format, err)
		}
		log.Info("wrote", "package", path)
		fmt.Println(path)
	}
	return nil
}

// Where the generated docs go in the packages.
const (
	pkgMan       = "/usr/share/man/man1/roomrelay.1.gz"
	pkgBash      = "/usr/share/bash-completion/completions/roomrelay"
	pkgZsh       = "/usr/share/zsh/vendor-completions/_roomrelay"
	pkgFish      = "/usr/share/fish/vendor_completions.d/roomrelay.fish"
	debianLicURL = "/usr/share/common-licenses/Apache-2.0"
)

// debianCopyright is /usr/share/doc/roomrelay/copyright in Debian's
// machine-readable format (DEP-5). Third-party Go modules are compiled in;
// their licenses are listed by `go version -m` on the binary.
const debianCopyright = `Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: roomrelay
Source: https://github.com/roomrelay/roomrelay

Files: *
Copyright: roomrelay maintainers
License: Apache-2.0

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License");
 you may not use this file except in compliance with the License.
 You may obtain a copy of the License at
 .
 http://www.apache.org/licenses/LICENSE-2.0
 .
 Unless required by applicable law or agreed to in writing, software
 distributed under the License is distributed on an "AS IS" BASIS,
 WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 See the License for the specific language governing permissions and
 limitations under the License.
 .
 On Debian systems, the complete text of the Apache License version 2.0
 can be found in "` + debianLicURL + `".
`

// generateDocs runs the device build for this machine to print its manual
// page (gzipped, as Debian policy wants) and completion scripts into stage;
// it returns package path → staged file.
func generateDocs(ctx context.Context, root, stage, version string) (map[string]string, error) {
	host := filepath.Join(stage, "roomrelay-host")
	cmd := exec.CommandContext(ctx, "go", "build", "-buildvcs=false",
		"-ldflags", "-X github.com/roomrelay/roomrelay/cli.Version="+version, "-o", host, "./cmd/roomrelay-agent")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build (for the docs): %w", err)
	}
	defer os.Remove(host)
	out := map[string]string{}
	for dst, args := range map[string][]string{
		pkgMan:  {"man"},
		pkgBash: {"completion", "bash"},
		pkgZsh:  {"completion", "zsh"},
		pkgFish: {"completion", "fish"},
	} {
		b, err := exec.CommandContext(ctx, host, args...).Output()
		if err != nil {
			return nil, fmt.Errorf("roomrelay %s: %w", strings.Join(args, " "), err)
		}
		if strings.HasSuffix(dst, ".gz") {
			var z bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
			zw.Write(b)
			zw.Close()
			b = z.Bytes()
		}
		// Under docs/, by the whole destination path: the bash
		// completion's name is the binary's.
		src := filepath.Join(stage, "docs", strings.ReplaceAll(strings.TrimPrefix(dst, "/"), "/", "_"))
		if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(src, b, 0o644); err != nil {
			return nil, err
		}
		out[dst] = src
	}
	return out, nil
}

// pkgWorker is where the sandbox worker goes: PREFIX/lib/roomrelay beside
// PREFIX/bin/roomrelay, where the device binary looks for it
// (findWorkerBinary in cli/snippet_worker.go).
const pkgWorker = "/usr/lib/roomrelay/roomrelay-sandbox"

func info(o options, contents files.Contents) *nfpm.Info {
	// Each packager rewrites Contents, so every format gets its own copy.
	c := make(files.Contents, len(contents))
	for i, x := range contents {
		cp := *x
		c[i] = &cp
	}
	return &nfpm.Info{
		Name:        "roomrelay",
		Arch:        o.arch,
		Platform:    "linux",
		Version:     o.version,
		Section:     "net",
		Priority:    "optional",
		Maintainer:  "roomrelay maintainers <maintainers@roomrelay.invalid>",
		Description: "device agent bridging local Rooms to a cloud hub\nKeeps an outbound websocket to a roomrelay hub and runs only the commands the device owner allowed against local Rooms. Run `roomrelay install` as your user (or `systemctl --user enable --now roomrelay`) after enrolling.",
		Vendor:      "roomrelay",
		Homepage:    "https://github.com/roomrelay/roomrelay",
		License:     "Apache-2.0",
		// Fixed mtime: the same inputs give the same package.
		MTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Overridables: nfpm.Overridables{
			Contents: c,
			// systemctl --user needs a user bus; Debian ships it separately.
			Recommends: []string{"dbus-user-session"},
			Suggests:   []string{"gnome-keyring"},
		},
	}
}

func pack(format, path string, info *nfpm.Info) (err error) {
	p, err := nfpm.Get(format)
	if err != nil {
		return err
	}
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return err
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.Validate(info); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	info.Target = path
	return p.Package(info, f)
}

// stageRuntime fetches (or finds in the cache) the pinned React runtime and
// copies its tarballs into dir, then checks dir alone holds a verified
// runtime. It returns the staged files, or none when the runtime is skipped.
func stageRuntime(ctx context.Context, log *slog.Logger, o options, dir string) ([]string, error) {
	if o.runtime == "none" {
		return nil, nil
	}
	cacheDir := o.cacheDir
	if cacheDir == "" {
		d, err := sandbox.DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		cacheDir = d
	}
	cfg := sandbox.Config{CacheDir: cacheDir, Registry: o.registry, Logger: log}
	if err := sandbox.EnsureRuntime(ctx, cfg, func(s string) { log.Info("runtime", "step", s) }); err != nil {
		if o.runtime == "required" {
			return nil, err
		}
		log.Warn("building without the sandbox's React runtime; the agent will fetch it on first use", "err", err)
		return nil, nil
	}
	src := filepath.Join(cacheDir, "jsruntime")
	entries, err := os.ReadDir(src)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var staged []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".tgz") {
			continue
		}
		dst := filepath.Join(dir, e.Name())
		if err := copyFile(filepath.Join(src, e.Name()), dst); err != nil {
			return nil, err
		}
		staged = append(staged, dst)
	}
	// The staged directory on its own must satisfy the sandbox, as
	// /usr/share/roomrelay/jsruntime will on the device.
	if err := sandbox.EnsureRuntime(ctx, sandbox.Config{RuntimeDir: dir}, nil); err != nil {
		return nil, fmt.Errorf("staged runtime does not verify: %w", err)
	}
	return staged, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run mkpkg inside the roomrelay module")
	}
	return filepath.Dir(gomod), nil
}

var releaseTag = regexp.MustCompile(`^v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)$`)

// gitVersion turns `git describe` into a package version: a release tag
// v1.2.3 gives 1.2.3; anything else gives 0.0.0-dev.<commit>.
func gitVersion(ctx context.Context, root string) string {
	cmd := exec.CommandContext(ctx, "git", "describe", "--tags", "--exact-match")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		if m := releaseTag.FindStringSubmatch(strings.TrimSpace(string(out))); m != nil {
			return m[1]
		}
	}
	cmd = exec.CommandContext(ctx, "git", "rev-parse", "--short=10", "HEAD")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		return "0.0.0-dev." + strings.TrimSpace(string(out))
	}
	return "0.0.0-dev"
}
