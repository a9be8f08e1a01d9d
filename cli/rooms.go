package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"text/tabwriter"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
)

// roomsFlags adds --home and returns an opener for the device's local Room
// store. The agent may hold it open at the same time: SQLite in WAL mode
// serialises the writers.
func roomsFlags(fs *flag.FlagSet, e *Env) func(context.Context) (*rooms.Store, error) {
	paths := pathFlags(fs, e)
	return func(ctx context.Context) (*rooms.Store, error) {
		p, err := paths()
		if err != nil {
			return nil, err
		}
		if err := p.MkdirAll(); err != nil {
			return nil, err
		}
		return rooms.Open(ctx, filepath.Join(p.Data, daemon.RoomsDB), e.Logger)
	}
}

func init() {
	Register(&Command{
		Name:     "rooms",
		Synopsis: "create|list|show",
		Summary:  "create and inspect the local Rooms on this device",
		Setup:    setupRooms,
	})
	Register(&Command{
		Name:     "rooms create",
		Synopsis: "--project P --name NAME [--id ID] [--json]",
		Summary:  "create a local Room in a project",
		Setup:    setupRoomsCreate,
	})
	Register(&Command{
		Name:     "rooms list",
		Synopsis: "[--project P] [--json]",
		Summary:  "list local Rooms with their app and pending-proposal counts",
		Setup:    setupRoomsList,
	})
	Register(&Command{
		Name:     "rooms show",
		Synopsis: "ROOM [--json]",
		Summary:  "show a local Room and its launcher, as the read tools see it",
		Setup:    setupRoomsShow,
	})
}

// setupRooms parses the flags of `roomrelay rooms` and returns its runner.
func setupRooms(fs *flag.FlagSet, e *Env) Runner {
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("unknown subcommand %q", args[0])
		}
		return usagef("give a subcommand: create, list or show")
	}
}

// setupRoomsCreate parses the flags of `roomrelay rooms create` and returns its runner.
func setupRoomsCreate(fs *flag.FlagSet, e *Env) Runner {
	open := roomsFlags(fs, e)
	project := fs.String("project", "", "project `id` (required)")
	name := fs.String("name", "", "room `name` (required)")
	id := fs.String("id", "", "room `id` (default: generated)")
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		if *project == "" || *name == "" || len(args) > 0 {
			return usagef("--project and --name are required")
		}
		s, err := open(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		if _, err := s.CreateProject(ctx, *project, *project); err != nil {
			return err
		}
		r, err := s.CreateRoom(ctx, rooms.NewRoom{ID: *id, ProjectID: *project, Name: *name})
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(e.Stdout).Encode(r)
		}
		fmt.Fprintf(e.Stdout, "created local room %s (%q) in project %s\n", r.ID, r.Name, r.Project)
		return nil
	}
}

// setupRoomsList parses the flags of `roomrelay rooms list` and returns its runner.
func setupRoomsList(fs *flag.FlagSet, e *Env) Runner {
	open := roomsFlags(fs, e)
	project := fs.String("project", "", "only this project `id`")
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		s, err := open(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		rs, err := s.ListRooms(ctx, *project)
		if err != nil {
			return err
		}
		if *asJSON {
			if rs == nil {
				rs = []rooms.RoomSummary{}
			}
			return json.NewEncoder(e.Stdout).Encode(map[string]any{"rooms": rs})
		}
		if len(rs) == 0 {
			fmt.Fprintln(e.Stdout, "no local rooms; create one with `roomrelay rooms create --project P --name NAME`")
			return nil
		}
		tw := tabwriter.NewWriter(e.Stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ROOM\tNAME\tPROJECT\tAPPS\tPENDING")
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", cell(r.ID), cell(r.Name), cell(r.Project), r.AppCount, r.PendingProposals)
		}
		return tw.Flush()
	}
}

// setupRoomsShow parses the flags of `roomrelay rooms show` and returns its runner.
func setupRoomsShow(fs *flag.FlagSet, e *Env) Runner {
	open := roomsFlags(fs, e)
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("want one room id")
		}
		s, err := open(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		all, err := s.ListRooms(ctx, "")
		if err != nil {
			return err
		}
		var room *rooms.RoomSummary
		for i := range all {
			if all[i].ID == args[0] {
				room = &all[i]
			}
		}
		if room == nil {
			return exitErr(ExitFailure, relay.Errorf(relay.CodeNotFound, "no local room %q (see `roomrelay rooms list`)", args[0]))
		}
		var apps []rooms.AppItem
		for cursor := ""; ; {
			page, err := s.ListRoomApps(ctx, room.Project, room.ID, rooms.MaxListLimit, cursor)
			if err != nil {
				return err
			}
			apps = append(apps, page.Items...)
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		if *asJSON {
			if apps == nil {
				apps = []rooms.AppItem{}
			}
			return json.NewEncoder(e.Stdout).Encode(map[string]any{"room": room, "apps": apps})
		}
		fmt.Fprintf(e.Stdout, "room %s (%q), project %s, %d apps, %d proposals pending review\n", room.ID, room.Name, room.Project, room.AppCount, room.PendingProposals)
		tw := tabwriter.NewWriter(e.Stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  #\tAPP\tNAME\tSOURCE\tLAUNCHER")
		for _, a := range apps {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", a.Launcher.Position, cell(a.InstanceID), cell(a.Name), a.Source, a.Launcher.State)
		}
		return tw.Flush()
	}
}
