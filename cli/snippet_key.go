package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"

	"github.com/roomrelay/roomrelay/relay"
)

func init() {
	Register(&Command{
		Name:     "snippet args",
		Synopsis: "--room R --name N DIR | FILE...",
		Summary:  "print the arguments of propose_room_snippet_app for a snippet directory, key included",
		Help: `Prints {room_id, name, files, idempotency_key} as propose_room_snippet_app
takes them, checked against its schema and the snippet path rules, with the
content-derived key of 'roomrelay snippet key'. Pipe it to the hub:

  roomrelay snippet args DIR --room R --name N |
    roomrelay hub call DEVICE propose_room_snippet_app --project P --args -`,
		Setup: setupSnippetArgs,
	})
	Register(&Command{
		Name:     "snippet key",
		Synopsis: "--room R --name N [--json] DIR | FILE...",
		Summary:  "print the content-derived idempotency key for proposing a snippet",
		Help: `Prints relay.SnippetKey(room, name, files): "snip-" and 32 hex digits of the
SHA-256 of a canonical encoding of the room id, the app name and every file.
A client that retries a proposal with this key after a lost response gets the
existing proposal back (duplicate: true) instead of a second review card; the
same key with other content is idempotency_conflict. --json adds the content
hash the owner's approval binds to.`,
		Setup: setupSnippetKey,
	})
}

// setupSnippetArgs parses the flags of `roomrelay snippet args` and returns its runner.
func setupSnippetArgs(fs *flag.FlagSet, e *Env) Runner {
	room := fs.String("room", "", "the Room `id` to propose the snippet to")
	name := fs.String("name", "", "the app `name` to propose")
	return func(ctx context.Context, args []string) error {
		args, err := interleavedFlags(fs, args)
		if err != nil {
			return err
		}
		if *room == "" || *name == "" {
			return usagef("--room and --name are required")
		}
		if len(args) == 0 {
			return usagef("give the snippet's directory or its files under src/")
		}
		files, err := readSnippetArgs(args)
		if err != nil {
			return err
		}
		out := relay.ProposeSnippetArgs{RoomID: *room, Name: *name, Files: files, IdempotencyKey: relay.SnippetKey(*room, *name, files)}
		raw, err := json.Marshal(out)
		if err != nil {
			return err
		}
		if err := relay.ValidateArgs(relay.CmdProposeRoomSnippetApp, raw); err != nil {
			return exitErr(ExitUsage, fmt.Errorf("the hub would refuse these arguments: %w", err))
		}
		_, err = fmt.Fprintf(e.Stdout, "%s\n", raw)
		return err
	}
}

// setupSnippetKey parses the flags of `roomrelay snippet key` and returns its runner.
func setupSnippetKey(fs *flag.FlagSet, e *Env) Runner {
	room := fs.String("room", "", "the Room `id` the snippet is proposed to")
	name := fs.String("name", "", "the app `name` as proposed")
	asJSON := fs.Bool("json", false, "print {idempotency_key, content_hash, files} as JSON")
	return func(ctx context.Context, args []string) error {
		if *room == "" || *name == "" {
			return usagef("--room and --name are required: the key covers them")
		}
		if len(args) == 0 {
			return usagef("give the snippet's directory or its files under src/")
		}
		files, err := readSnippetArgs(args)
		if err != nil {
			return err
		}
		key := relay.SnippetKey(*room, *name, files)
		if *asJSON {
			return reviewJSON(e.Stdout, map[string]any{"idempotency_key": key,
				"content_hash": relay.ContentHash(files), "files": len(files)})
		}
		fmt.Fprintln(e.Stdout, key)
		return nil
	}
}
