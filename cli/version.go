package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is set at build time with -ldflags "-X github.com/roomrelay/roomrelay/cli.Version=v1.2.3".
var Version = "dev"

// versionInfo is what `roomrelay version --json` prints.
type versionInfo struct {
	Version   string `json:"version"`
	Protocol  string `json:"protocol"`
	GoVersion string `json:"go"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	Build     string `json:"build"` // "full" (hub and demo included) or "agent" (cmd/roomrelay-agent): see buildFlavor
	Revision  string `json:"revision,omitempty"`
}

func currentVersion() versionInfo {
	v := versionInfo{Version: Version, Protocol: "roomrelay.v1", GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, Build: buildFlavor()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v.Revision = s.Value
			}
		}
	}
	return v
}

func init() {
	Register(&Command{
		Name:    "version",
		Summary: "print the version of this binary and the protocol it speaks",
		Setup:   setupVersion,
	})
}

// setupVersion parses the flags of `roomrelay version` and returns its runner.
func setupVersion(fs *flag.FlagSet, e *Env) Runner {
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("version takes no arguments")
		}
		v := currentVersion()
		if *asJSON {
			return json.NewEncoder(e.Stdout).Encode(v)
		}
		fmt.Fprintf(e.Stdout, "roomrelay %s (protocol %s, %s build, %s, %s/%s)\n", v.Version, v.Protocol, v.Build, v.GoVersion, v.OS, v.Arch)
		return nil
	}
}
