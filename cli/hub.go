package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// DefaultHubListen is where `roomrelay hub` listens unless told otherwise.
const DefaultHubListen = "127.0.0.1:7780"

func init() {
	Register(&Command{
		Name:     "hub pair",
		Synopsis: "--project P [--ttl 10m] [--json]",
		Summary:  "print a one-time pairing code that enrolls a device for a project",
		Setup:    setupHubPair,
	})

	Register(&Command{
		Name:     "hub revoke",
		Synopsis: "DEVICE",
		Summary:  "revoke a device: its token stops working and its socket is closed",
		Setup:    setupHubRevoke,
	})

	Register(&Command{
		Name:     "hub devices",
		Synopsis: "[DEVICE] [--json]",
		Summary:  "list enrolled devices with their presence, or show one",
		Setup:    setupHubDevices,
	})

	Register(&Command{
		Name:     "hub call",
		Synopsis: "DEVICE COMMAND --project P [--args JSON|@FILE|-] [--timeout 30s] | --schema COMMAND",
		Summary:  "send one command to a device through the hub and print its result",
		Help: `Prints the result JSON as the device returned it. Exits 0 when the command
succeeded; when it failed (the error code is in the JSON), with its code's exit
code (sysexits), 1 for a code outside this table:
` + codeExitsHelp() + `

--args takes the arguments as a JSON object, @FILE to read them from a file,
or - to read them from stdin. Each command's arguments follow its JSON
Schema: 'roomrelay hub call --schema COMMAND' prints it. A snippet proposal's
arguments are easiest built with 'roomrelay snippet args DIR'.

Commands: ` + strings.Join(relay.CommandNames(), ", ") + `.`,
		Setup: setupHubCall,
	})
}

// setupHubPair parses the flags of `roomrelay hub pair` and returns its runner.
func setupHubPair(fs *flag.FlagSet, e *Env) Runner {
	c := adminClientFlags(fs, e)
	project := fs.String("project", "", "project `id` the device is enrolled for (required)")
	ttl := fs.Duration("ttl", hubapi.DefaultPairingTTL, "how long the code stays valid (at most 1h)")
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		if *project == "" || len(args) > 0 {
			return usagef("--project is required and no arguments are taken")
		}
		cl, err := c()
		if err != nil {
			return err
		}
		pc, err := cl.Pair(ctx, *project, *ttl)
		if err != nil {
			return hubCallErr(err)
		}
		if *asJSON {
			return json.NewEncoder(e.Stdout).Encode(pc)
		}
		fmt.Fprintf(e.Stdout, "%s\n", pc.Code)
		fmt.Fprintf(e.Stderr, "pairing code for project %s, single use, expires %s (in %s).\non the device: roomrelay enroll --hub %s --code %s\n",
			pc.Project, pc.ExpiresAt.Local().Format(time.Kitchen), time.Until(pc.ExpiresAt).Round(time.Second), cl.BaseURL, pc.Code)
		return nil
	}
}

// setupHubRevoke parses the flags of `roomrelay hub revoke` and returns its runner.
func setupHubRevoke(fs *flag.FlagSet, e *Env) Runner {
	c := adminClientFlags(fs, e)
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("want exactly one device id")
		}
		cl, err := c()
		if err != nil {
			return err
		}
		d, err := cl.Revoke(ctx, args[0])
		if err != nil {
			return hubCallErr(err)
		}
		fmt.Fprintf(e.Stdout, "revoked %s (%s); it must be enrolled again to connect\n", d.ID, d.Name)
		return nil
	}
}

// setupHubDevices parses the flags of `roomrelay hub devices` and returns its runner.
func setupHubDevices(fs *flag.FlagSet, e *Env) Runner {
	c := adminClientFlags(fs, e)
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) > 1 {
			return usagef("at most one device id")
		}
		cl, err := c()
		if err != nil {
			return err
		}
		var devs []hubapi.Device
		if len(args) == 1 {
			d, err := cl.Device(ctx, args[0])
			if err != nil {
				return hubCallErr(err)
			}
			devs = []hubapi.Device{*d}
		} else if devs, err = cl.Devices(ctx); err != nil {
			return hubCallErr(err)
		}
		if *asJSON {
			if len(args) == 1 {
				return json.NewEncoder(e.Stdout).Encode(devs[0])
			}
			return json.NewEncoder(e.Stdout).Encode(hubapi.DeviceList{Devices: devs})
		}
		printDevices(e, devs)
		return nil
	}
}

// setupHubCall parses the flags of `roomrelay hub call` and returns its runner.
func setupHubCall(fs *flag.FlagSet, e *Env) Runner {
	c := adminClientFlags(fs, e)
	project := fs.String("project", "", "project `id` (required)")
	argsJSON := fs.String("args", "{}", "command arguments: a JSON `object`, @FILE, or - for stdin")
	timeout := fs.Duration("timeout", hubapi.DefaultCommandTimeout, "how long the device may take")
	id := fs.String("id", "", "command `id` (default: the hub makes one); resending an id returns the stored result")
	schema := fs.String("schema", "", "print the JSON Schema of `COMMAND`'s arguments and exit")
	return func(ctx context.Context, args []string) error {
		if *schema != "" {
			b, ok := relay.SchemaJSON(*schema)
			if !ok {
				return usagef("no command %q (commands: %s)", *schema, strings.Join(relay.CommandNames(), ", "))
			}
			_, err := e.Stdout.Write(b)
			return err
		}
		if len(args) != 2 || *project == "" {
			return usagef("want DEVICE COMMAND and --project")
		}
		raw, err := readArgs(e, *argsJSON)
		if err != nil {
			return err
		}
		cl, err := c()
		if err != nil {
			return err
		}
		res, _, err := cl.Command(ctx, args[0], hubapi.CommandRequest{ID: *id, ProjectID: *project, Name: args[1],
			Args: raw, TimeoutMS: timeout.Milliseconds()})
		if err != nil {
			return hubCallErr(err)
		}
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
		if !res.OK {
			return silent(resultExit(res))
		}
		return nil
	}
}

// codeExitsHelp lists relay's error codes by the exit code they end a
// command with, one line per exit code, from the one table.
func codeExitsHelp() string {
	by := map[int][]string{}
	for _, c := range relay.Codes() {
		by[c.ExitCode()] = append(by[c.ExitCode()], string(c))
	}
	var b strings.Builder
	for _, code := range slices.Sorted(maps.Keys(by)) {
		fmt.Fprintf(&b, "  %d  %s\n", code, strings.Join(by[code], ", "))
	}
	return b.String()
}

// resultExit is the exit code of a failed command's result: its code's in
// relay's table (sysexits: 75 try again later, 77 not allowed, …), 1 for a
// code outside it.
func resultExit(res *relay.Result) int {
	if res.Error == nil {
		return ExitFailure
	}
	return res.Error.Code.ExitCode()
}

// maxArgsBytes bounds --args read from a file or stdin (the hub refuses
// larger frames anyway).
const maxArgsBytes = 4 << 20

// readArgs resolves --args: inline JSON, @FILE or - (stdin); it must be a
// JSON object.
func readArgs(e *Env, v string) (json.RawMessage, error) {
	var b []byte
	switch {
	case v == "-":
		if e.Stdin == nil {
			return nil, usagef("--args -: no stdin")
		}
		var err error
		if b, err = io.ReadAll(io.LimitReader(e.Stdin, maxArgsBytes+1)); err != nil {
			return nil, fmt.Errorf("read --args from stdin: %w", err)
		}
	case strings.HasPrefix(v, "@"):
		f, err := os.Open(v[1:])
		if err != nil {
			return nil, exitErr(ExitUsage, fmt.Errorf("--args %s: %w", v, err))
		}
		defer f.Close()
		if b, err = io.ReadAll(io.LimitReader(f, maxArgsBytes+1)); err != nil {
			return nil, fmt.Errorf("read --args %s: %w", v, err)
		}
	default:
		b = []byte(v)
	}
	if len(b) > maxArgsBytes {
		return nil, usagef("--args is over %d bytes", maxArgsBytes)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, usagef("--args is not a JSON object: %v", err)
	}
	return json.RawMessage(b), nil
}

func printDevices(e *Env, devs []hubapi.Device) {
	if len(devs) == 0 {
		fmt.Fprintln(e.Stdout, "no devices enrolled; create a pairing code with `roomrelay hub pair --project P`")
		return
	}
	tw := tabwriter.NewWriter(e.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tNAME\tSTATE\tSINCE/LAST SEEN\tPROJECTS\tSERVES")
	for _, d := range devs {
		state := d.Presence.State
		when := d.Presence.Since
		if state == hubapi.StateOffline {
			when = d.Presence.LastSeen
		}
		if d.Revoked {
			state = "revoked"
		}
		w := "-"
		if !when.IsZero() {
			w = when.Local().Format(time.DateTime)
		}
		var serves []string
		for _, p := range d.Policy {
			serves = append(serves, p.Project+":"+strings.Join(p.Commands, ","))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(d.ID), cell(d.Name), state, w, cell(strings.Join(d.Projects, ",")), cell(strings.Join(serves, " ")))
	}
	tw.Flush()
}

// hubURLFile is where a running hub writes the URL its admin commands on
// this machine reach it at, beside its admin token.
const hubURLFile = "hub-url"

// SaveHubURL writes the URL admin commands with this data dir (--home,
// --data-dir) default to. Called by the hub once it serves, holding the
// data dir's lock.
func SaveHubURL(dataDir, url string) error {
	path := filepath.Join(dataDir, hubURLFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(url+"\n"), 0o600); err != nil {
		return fmt.Errorf("write the hub URL: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write the hub URL: %w", err)
	}
	return nil
}

// adminHubURL is the hub an admin command calls: --hub, else
// ROOMRELAY_HUB, else what the hub on dataDir wrote, else the default
// listen address.
func adminHubURL(e *Env, dataDir, flagURL string) string {
	if flagURL != "" {
		return flagURL
	}
	if u := e.Getenv("ROOMRELAY_HUB"); u != "" {
		return u
	}
	if b, err := os.ReadFile(filepath.Join(dataDir, hubURLFile)); err == nil {
		if u := strings.TrimSpace(string(b)); strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
			return u
		}
	}
	return "http://" + DefaultHubListen
}

func hubDataDir(paths func() (device.Paths, error), flagDir string) (string, error) {
	if flagDir != "" {
		return filepath.Abs(flagDir)
	}
	p, err := paths()
	if err != nil {
		return "", err
	}
	return filepath.Join(p.Data, "hub"), nil
}

// hubAdminToken finds the admin token for an admin command: flag, env, then
// the hub's data dir file (which only the hub itself creates).
func hubAdminToken(e *Env, dataDir, flagTok string) (string, error) {
	if flagTok != "" {
		return flagTok, nil
	}
	if t := e.Getenv("ROOMRELAY_ADMIN_TOKEN"); t != "" {
		return t, nil
	}
	b, err := os.ReadFile(filepath.Join(dataDir, "admin-token"))
	if err != nil {
		return "", exitErr(ExitUsage, fmt.Errorf("no admin token: pass --admin-token, set ROOMRELAY_ADMIN_TOKEN, or run this on the hub's machine (looked in %s): %w", dataDir, err))
	}
	return strings.TrimSpace(string(b)), nil
}

// adminTokenFlags adds --admin-token and --admin-token-file.
func adminTokenFlags(fs *flag.FlagSet) (tok, file *string) {
	tok = fs.String("admin-token", "", "admin `token` (visible to other users in the process list: prefer --admin-token-file or env ROOMRELAY_ADMIN_TOKEN; default: the hub's admin-token file)")
	file = fs.String("admin-token-file", "", "read the admin token from this `file` (kept out of argv)")
	return tok, file
}

// readTokenFlag is --admin-token, or the first line of --admin-token-file.
func readTokenFlag(tok, file string) (string, error) {
	if file == "" {
		return tok, nil
	}
	if tok != "" {
		return "", usagef("give --admin-token or --admin-token-file, not both")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", exitErr(ExitUsage, fmt.Errorf("--admin-token-file: %w", err))
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", exitErr(ExitUsage, fmt.Errorf("--admin-token-file %s is empty", file))
	}
	return t, nil
}

// adminClientFlags adds the flags every admin command shares and returns a
// constructor for the client.
func adminClientFlags(fs *flag.FlagSet, e *Env) func() (*hubclient.Client, error) {
	paths := pathFlags(fs, e)
	hubURL := fs.String("hub", "", "hub `url` (default: env ROOMRELAY_HUB, else the URL the hub wrote in its data dir, else http://"+DefaultHubListen+")")
	dataDir := fs.String("data-dir", "", "the hub's data `dir`, to read its admin-token file (default DATA/hub)")
	tok, tokFile := adminTokenFlags(fs)
	caFile := caFileFlag(fs, e)
	return func() (*hubclient.Client, error) {
		dir, err := hubDataDir(paths, *dataDir)
		if err != nil {
			return nil, err
		}
		flagTok, err := readTokenFlag(*tok, *tokFile)
		if err != nil {
			return nil, err
		}
		t, err := hubAdminToken(e, dir, flagTok)
		if err != nil {
			return nil, err
		}
		hc, err := hubHTTPClient(*caFile)
		if err != nil {
			return nil, err
		}
		cl := hubclient.New(adminHubURL(e, dir, *hubURL), t)
		cl.HTTP = hc
		return cl, nil
	}
}

// hubCallErr turns a hub client error into a message with what to do.
func hubCallErr(err error) error {
	var ae *hubclient.APIError
	if errors.As(err, &ae) {
		if ae.Code == hubapi.CodeOAuthOff {
			return exitErr(ExitFailure, errors.New(ae.Message))
		}
		switch ae.Status {
		case 401:
			return exitErr(ExitUsage, fmt.Errorf("%w (check the admin token)", err))
		case 404:
			return exitErr(ExitFailure, err)
		}
		return err
	}
	if hubclient.Unreachable(err) {
		return exitErr(ExitUnavailable, hubclient.Explain(err))
	}
	return err
}
