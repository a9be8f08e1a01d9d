package cli

import (
	"flag"
	"time"

	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/sandbox"
)

// A binary is composed by what its main imports: cli holds the commands
// every build has (the device's, and the hub admin commands, which only
// speak HTTP), and a package such as cli/hubcmd (the hub server, the demo,
// the sandbox worker subcommand) adds its own with Register from an init
// function, so only a main that imports it links what it needs (nats-server,
// esbuild, goja). The rest of this file is what such a package shares with
// cli's own commands: flags and device files with one meaning everywhere.
// Nothing else outside cli should need it.

// Register adds a command. It must be called before Main (from an init
// function or main) and panics on a name registered twice.
func Register(c *Command) {
	if _, dup := commands[c.Name]; dup {
		panic("cli: command registered twice: " + c.Name)
	}
	commands[c.Name] = c
}

// HubDataDirFlags adds --home and --data-dir, and returns what they name:
// the hub's data dir, --data-dir or DATA/hub (what the hub admin commands
// read their admin token from).
func HubDataDirFlags(fs *flag.FlagSet, e *Env) func() (string, error) {
	paths := pathFlags(fs, e)
	dataDir := fs.String("data-dir", "", "hub data `dir` (default DATA/hub)")
	return func() (string, error) { return hubDataDir(paths, *dataDir) }
}

// AdminTokenFlags adds --admin-token and --admin-token-file; read gives the
// token they name ("" when neither is set), refusing both at once.
func AdminTokenFlags(fs *flag.FlagSet) (tok, file *string, read func() (string, error)) {
	tok, file = adminTokenFlags(fs)
	return tok, file, func() (string, error) { return readTokenFlag(*tok, *file) }
}

// AdminToken is the admin token an admin command uses: flagTok, else
// ROOMRELAY_ADMIN_TOKEN, else the admin-token file in dataDir.
func AdminToken(e *Env, dataDir, flagTok string) (string, error) {
	return hubAdminToken(e, dataDir, flagTok)
}

// SandboxFlags adds the flags that say where the sandbox's React runtime is
// (--runtime-dir, --cache-dir, --registry); config gives the pool's
// configuration with its worker command, or an error naming what is missing.
func SandboxFlags(fs *flag.FlagSet, e *Env) (config func() (sandbox.Config, error)) {
	rf := addRuntimeFlags(fs, e)
	return func() (sandbox.Config, error) {
		cfg, err := rf.config(e)
		if err != nil {
			return cfg, err
		}
		cfg.WorkerCommand, err = sandboxWorker(e)
		return cfg, err
	}
}

// DeviceDirs are a device's directories below a --home dir.
type DeviceDirs struct{ Config, State, Data string }

// SaveEnrollment writes below home what `roomrelay enroll --home home
// --credential-store file` records besides the token (which the caller
// puts in the file credential store in dirs.Config): the directories and
// config.json.
func SaveEnrollment(home, hubURL, deviceID, deviceName string, projects []string) (DeviceDirs, error) {
	p, err := device.ResolvePaths(home, func(string) string { return "" })
	if err != nil {
		return DeviceDirs{}, err
	}
	dirs := DeviceDirs{Config: p.Config, State: p.State, Data: p.Data}
	if err := p.MkdirAll(); err != nil {
		return dirs, err
	}
	return dirs, device.SaveConfig(p, &device.Config{Hub: hubURL, DeviceID: deviceID, DeviceName: deviceName, Projects: projects,
		CredentialStore: credstore.KindFile, EnrolledAt: time.Now().UTC()})
}

// PolicyPath is the owner's policy file in a device's config dir.
func PolicyPath(configDir string) string { return policyPath(device.Paths{Config: configDir}) }

// buildFlavor is reported by `roomrelay version`: "full" when the hub server
// is registered (cmd/roomrelay imports cli/hubcmd), else "agent" (the device
// binary cmd/roomrelay-agent, whose hub and demo are hidden stubs that say
// they are not in this build).
func buildFlavor() string {
	if c, ok := commands["hub"]; ok && !c.Hidden {
		return "full"
	}
	return "agent"
}
