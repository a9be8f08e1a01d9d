// Package cli is roomrelay's command-line front: it parses arguments, flags
// and the environment, wires the packages together and maps failures to exit
// codes. It is the only package that reads flags, environment variables or
// os.Args; everything below it takes explicit configuration.
//
// Each subcommand registers itself from its own file with Register. A
// command's Setup defines its flags on a fresh FlagSet and returns the closure
// that runs it, so flags stay local to the command that owns them. Commands
// that link a server or a JavaScript engine live in cli/hubcmd, which only
// the full cmd/roomrelay imports (see extend.go).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
)

// Exit codes, documented in the README.
const (
	ExitOK          = 0
	ExitFailure     = 1 // the command ran and failed
	ExitUsage       = 2 // bad flags or arguments
	ExitNotEnrolled = 3 // the device must be enrolled (again) before this works
	ExitUnavailable = 4 // a needed service (hub, agent, keyring) is not reachable
	// A command that failed with a code of relay's closed set (`hub call`,
	// and a refusal of the running agent's local API) exits with that
	// code's relay.Code.ExitCode: sysexits(3) values from 65 up.
)

// Env is what a command may use of the outside world. Tests build one with
// buffers and a map-backed Getenv.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
	// Executable is the path of the running binary, used to start sandbox
	// workers and to install the service. Empty in tests that do not need it.
	Executable string
	// Logger is set up from --log-level before a command runs.
	Logger *slog.Logger
	// LogLevel is the --log-level in effect, for a command that must open
	// its own log (the Windows service writes to a file: it has no stderr).
	LogLevel slog.Level
}

// Runner runs a command once its flags are parsed; args are the positional
// arguments left after the flags.
type Runner func(ctx context.Context, args []string) error

// Command is one subcommand such as "hub pair"; packages outside cli add
// theirs with Register.
type Command struct {
	Name     string // words, e.g. "hub pair"
	Synopsis string // arguments after the name, e.g. "--project P [--ttl 10m]"
	Summary  string // one line for the command list
	Help     string // paragraphs for --help, optional
	Hidden   bool   // left out of the command list (internal worker entry points)
	Daemon   bool   // long-running (run, hub): logs at info by default, others at warn
	Setup    func(fs *flag.FlagSet, e *Env) Runner
}

var commands = map[string]*Command{}

// ExitError is how a command fails: the exit code, and what to print.
// Err nil means the command already said everything (only the code
// remains); Usage means a mistake in the invocation, followed by the
// command's help.
type ExitError struct {
	Code  int
	Err   error
	Usage bool
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit %d", e.Code)
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// usagef is a mistake in the invocation: ExitUsage, with the help.
func usagef(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...), Usage: true}
}

// exitErr fails with code, printing err.
func exitErr(code int, err error) error { return &ExitError{Code: code, Err: err} }

// silent fails with code after the command printed what it had to say.
func silent(code int) error { return &ExitError{Code: code} }

// Main runs roomrelay with args (without the program name) and returns the
// process exit code.
func Main(ctx context.Context, args []string, e *Env) int {
	if e.Getenv == nil {
		e.Getenv = func(string) string { return "" }
	}
	if e.Stdin == nil {
		e.Stdin = strings.NewReader("")
	}
	args = normalizeArgs(args)
	cmd, rest := lookup(args)
	if cmd == nil {
		if len(args) == 0 || isHelp(args[0]) || args[0] == "help" {
			printCommands(e.Stdout, "")
			return ExitOK
		}
		// "roomrelay hub nonsense" or "roomrelay nonsense": say what exists.
		fmt.Fprintf(e.Stderr, "roomrelay: unknown command %q\n\n", strings.Join(leadingWords(args), " "))
		printCommands(e.Stderr, "")
		return ExitUsage
	}
	fs := flag.NewFlagSet("roomrelay "+cmd.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// Long-running commands log their work; the others print what they did
	// for a person, with only warnings and errors logged beside it.
	defLevel := "warn"
	if cmd.Daemon {
		defLevel = "info"
	}
	logLevel := fs.String("log-level", envOr(e.Getenv, "ROOMRELAY_LOG_LEVEL", defLevel), "log level: debug, info, warn, error")
	run := cmd.Setup(fs, e)
	positional, err := parseInterleaved(fs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(e.Stdout, cmd, fs)
			return ExitOK
		}
		fmt.Fprintf(e.Stderr, "roomrelay %s: %v\n\n", cmd.Name, err)
		printHelp(e.Stderr, cmd, fs)
		return ExitUsage
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(e.Stderr, "roomrelay %s: --log-level %q: want debug, info, warn or error\n", cmd.Name, *logLevel)
		return ExitUsage
	}
	e.LogLevel = lvl
	if e.Logger == nil {
		e.Logger = slog.New(slog.NewTextHandler(e.Stderr, &slog.HandlerOptions{Level: lvl}))
	}
	return report(e, cmd, fs, run(ctx, positional))
}

// normalizeArgs accepts the spellings people type: --version, help CMD
// (CMD --help), and service start|stop|restart|install|uninstall for the
// service verbs registered without the word "service".
func normalizeArgs(args []string) []string {
	if len(args) == 0 {
		return args
	}
	switch {
	case args[0] == "--version" || args[0] == "-version" || args[0] == "-V":
		return append([]string{"version"}, args[1:]...)
	case args[0] == "help" && len(args) > 1:
		return append(slices.Clone(args[1:]), "--help")
	case args[0] == "service" && len(args) > 1:
		switch args[1] {
		case "start", "stop", "restart", "install", "uninstall":
			return args[1:]
		}
	}
	return args
}

// parseInterleaved parses flags that come after positional arguments too
// ("hub call DEV read_room --project P"), as users type them.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func report(e *Env, cmd *Command, fs *flag.FlagSet, err error) int {
	if err == nil {
		return ExitOK
	}
	code := deviceExit[device.KindOf(err)] // ExitFailure unless a device workflow said more
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err == nil {
			return ee.Code // silent: already said
		}
		code = ee.Code
	}
	if f := fs.Lookup("json"); f != nil && f.Value.String() == "true" {
		// A script reading stdout gets an object there too, not silence.
		_ = json.NewEncoder(e.Stdout).Encode(jsonError(err, code))
	}
	// An error may quote a hub (a reason phrase, a JSON message): shown
	// through relay.Printable, like everything from the network.
	fmt.Fprintf(e.Stderr, "roomrelay %s: %s\n", cmd.Name, relay.Printable(err.Error()))
	if ee != nil && ee.Usage {
		fmt.Fprintln(e.Stderr)
		printHelp(e.Stderr, cmd, fs)
	}
	return code
}

// jsonFailure is what a command run with --json prints on stdout when it
// fails: {"error": {"code": ..., "message": ..., "exit_code": N}}.
type jsonFailure struct {
	Error struct {
		Code     string `json:"code"`
		Message  string `json:"message"`
		ExitCode int    `json:"exit_code"`
	} `json:"error"`
}

// jsonError names a failure: the hub's or the device's error code when
// there is one, else what the exit code means.
func jsonError(err error, exit int) jsonFailure {
	var f jsonFailure
	f.Error.Message, f.Error.ExitCode = err.Error(), exit
	var ae *hubclient.APIError
	var re *relay.Error
	switch {
	case errors.As(err, &ae):
		f.Error.Code = ae.Code
	case errors.As(err, &re):
		f.Error.Code = string(re.Code)
	default:
		f.Error.Code = map[int]string{ExitUsage: "usage", ExitNotEnrolled: "not_enrolled", ExitUnavailable: "unavailable"}[exit]
		if f.Error.Code == "" {
			f.Error.Code = "failed"
		}
	}
	return f
}

// lookup finds the longest registered command name that the leading words of
// args spell, and returns it with the remaining arguments.
func lookup(args []string) (*Command, []string) {
	words := leadingWords(args)
	for n := len(words); n > 0; n-- {
		if c, ok := commands[strings.Join(words[:n], " ")]; ok {
			return c, args[n:]
		}
	}
	return nil, args
}

func leadingWords(args []string) []string {
	var w []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") || len(w) == 3 {
			break
		}
		w = append(w, a)
	}
	return w
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

func printCommands(w io.Writer, prefix string) {
	fmt.Fprint(w, `roomrelay bridges local Rooms on this device to a cloud hub over an outbound
websocket, running only the commands the device owner allows.

Usage: roomrelay COMMAND [flags] [args]

Commands:
`)
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if !c.Hidden && strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-18s %s\n", n, commands[n].Summary)
	}
	fmt.Fprint(w, `
Run 'roomrelay COMMAND --help' for a command's flags.
Exit codes: 0 ok, 1 failed, 2 usage error, 3 device not enrolled, 4 service unavailable.
`)
}

func printHelp(w io.Writer, c *Command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: roomrelay %s %s\n\n%s\n", c.Name, c.Synopsis, c.Summary)
	if c.Help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.Help))
	}
	var sub []string
	for n, sc := range commands {
		if !sc.Hidden && strings.HasPrefix(n, c.Name+" ") {
			sub = append(sub, n)
		}
	}
	if len(sub) > 0 {
		sort.Strings(sub)
		fmt.Fprintln(w, "\nSubcommands:")
		for _, n := range sub {
			fmt.Fprintf(w, "  %-18s %s\n", n, commands[n].Summary)
		}
	}
	fmt.Fprintln(w, "\nFlags:")
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%-28s %s", line, usage)
		if f.DefValue != "" && f.DefValue != "false" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// OSEnv is the Env of the real process.
func OSEnv() *Env {
	exe, _ := os.Executable()
	return &Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv, Executable: exe}
}

// cell is s as one cell of a human table: control characters, bidi
// overrides and the table's own separators (tab, newline) shown as
// ⟨U+XXXX⟩, so a name from the network cannot clear the screen or forge a
// row.
func cell(s string) string { return relay.PrintableLine(s) }
