package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/review"
	"github.com/roomrelay/roomrelay/agent/rooms"
)

// reviewStoreFlags adds --home and returns an opener of the device's local
// store for the owner's review. Unlike roomsFlags it does not create a store:
// reviewing where nothing was ever proposed is a mistake worth naming. The
// agent may hold the store open at the same time (SQLite WAL serialises
// writers) and tells the hub of each decision.
// noStoreError: the device has no local Room store yet, so nothing was
// ever proposed here. `review list` says so and succeeds, like `rooms list`;
// the commands naming a proposal fail with it.
type noStoreError struct{ path string }

func (e *noStoreError) Error() string {
	return fmt.Sprintf("no local Room store at %s: nothing was proposed on this device yet (is --home right?)", e.path)
}

func reviewStoreFlags(flags *flag.FlagSet, e *Env) func(context.Context) (*rooms.Store, error) {
	paths := pathFlags(flags, e)
	return func(ctx context.Context) (*rooms.Store, error) {
		p, err := paths()
		if err != nil {
			return nil, err
		}
		path := filepath.Join(p.Data, daemon.RoomsDB)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, &noStoreError{path: path}
		}
		return rooms.Open(ctx, path, e.Logger)
	}
}

const reviewHelp = `Proposals from the cloud wait here, pending: not in the launcher, not
openable, not smoke-runnable, until the owner approves that exact content on
this device. 'review show' prints every file in full and the content hash;
'review approve' binds the approval to that hash and is refused if the
content is not what was shown. The running agent tells the hub within its
tick, so a cloud caller waiting on the proposal learns of it at once.

With --web, serves a review page on 127.0.0.1 on a random port and prints
its address, which holds a one-time session token; it runs until Ctrl-C.
Control characters and bidi controls in files are shown as <U+XXXX> markers.`

func init() {
	register(&Command{
		Name:     "review",
		Synopsis: "[--web [--open]] | list | show ID | approve ID | decline ID",
		Summary:  "review proposals on this device: list, show, approve, decline, or a local web page",
		Help:     reviewHelp,
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
			open := reviewStoreFlags(fs, e)
			web := fs.Bool("web", false, "serve the review page on 127.0.0.1 (random port) until interrupted")
			openPage := fs.Bool("open", false, "with --web: open the page in the default browser")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("unknown subcommand %q (want list, show, approve, decline or --web)", args[0])
				}
				s, err := open(ctx)
				if err != nil {
					return err
				}
				defer s.Close()
				if !*web {
					return reviewList(ctx, e, s, false, false)
				}
				return reviewWeb(ctx, e, s, *openPage)
			}
		},
	})
	register(&Command{
		Name:     "review list",
		Synopsis: "[--all] [--json]",
		Summary:  "list proposals waiting for review (--all: decided ones too)",
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
			open := reviewStoreFlags(fs, e)
			all := fs.Bool("all", false, "include approved and declined proposals")
			asJSON := fs.Bool("json", false, "print JSON")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("unexpected argument %q", args[0])
				}
				s, err := open(ctx)
				var ns *noStoreError
				if errors.As(err, &ns) {
					return reviewList(ctx, e, nil, *all, *asJSON)
				}
				if err != nil {
					return err
				}
				defer s.Close()
				return reviewList(ctx, e, s, *all, *asJSON)
			}
		},
	})
	register(&Command{
		Name:     "review show",
		Synopsis: "ID [--json]",
		Summary:  "print a proposal with every file in full, its sizes and content hash",
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
			open := reviewStoreFlags(fs, e)
			asJSON := fs.Bool("json", false, "print JSON (files verbatim)")
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 {
					return usagef("give one proposal ID (see `roomrelay review list`)")
				}
				s, err := open(ctx)
				if err != nil {
					return err
				}
				defer s.Close()
				d, err := s.GetProposal(ctx, args[0])
				if err != nil {
					return err
				}
				if *asJSON {
					return reviewJSON(e.Stdout, d)
				}
				printProposal(e.Stdout, d, true)
				return nil
			}
		},
	})
	register(&Command{
		Name:     "review approve",
		Synopsis: "ID [--hash H]",
		Summary:  "approve a proposal: its app enters the Room's launcher",
		Help: `Approves the content with hash H (as 'review show' prints it) and refuses if
the proposal's content is not that. Without --hash, prints the files with
their sizes and the hash, and approves that hash.`,
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
			open := reviewStoreFlags(fs, e)
			hash := fs.String("hash", "", "the content `hash` that was reviewed")
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 {
					return usagef("give one proposal ID (see `roomrelay review list`)")
				}
				s, err := open(ctx)
				if err != nil {
					return err
				}
				defer s.Close()
				h := *hash
				if h == "" {
					d, err := s.GetProposal(ctx, args[0])
					if err != nil {
						return err
					}
					printProposal(e.Stdout, d, false)
					h = d.ContentHash
				}
				ap, err := s.ApproveProposal(ctx, args[0], h)
				if errors.Is(err, rooms.ErrContentChanged) {
					return fmt.Errorf("not approved: %w", err)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(e.Stdout, "approved %s: %q is in the launcher of room %s/%s, instance_id %s (hash %s).\n",
					ap.ID, ap.Name, ap.Project, ap.RoomID, ap.InstanceID, ap.ContentHash)
				fmt.Fprintln(e.Stdout, "The running agent tells the hub within its tick.")
				return nil
			}
		},
	})
	register(&Command{
		Name:     "review decline",
		Synopsis: "ID",
		Summary:  "decline a proposal: its files are discarded, its key stays spent",
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
			open := reviewStoreFlags(fs, e)
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 {
					return usagef("give one proposal ID (see `roomrelay review list`)")
				}
				s, err := open(ctx)
				if err != nil {
					return err
				}
				defer s.Close()
				dp, err := s.DeclineProposal(ctx, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(e.Stdout, "declined %s: %q was discarded; its idempotency key stays spent.\n", dp.ID, dp.Name)
				return nil
			}
		},
	})
}

func reviewJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func reviewList(ctx context.Context, e *Env, s *rooms.Store, all, asJSON bool) error {
	f := rooms.ProposalFilter{State: rooms.ProposalPending}
	if all {
		f.State = ""
	}
	var ps []rooms.Proposal
	if s != nil { // nil: no store yet, so no proposals
		var err error
		if ps, err = s.ListProposals(ctx, f); err != nil {
			return err
		}
	}
	if asJSON {
		if ps == nil {
			ps = []rooms.Proposal{}
		}
		return reviewJSON(e.Stdout, map[string]any{"proposals": ps})
	}
	if len(ps) == 0 {
		if all {
			fmt.Fprintln(e.Stdout, "No proposals.")
		} else {
			fmt.Fprintln(e.Stdout, "No proposals wait for review.")
		}
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tROOM\tKIND\tNAME\tFILES\tBYTES\tPROPOSED")
	for _, x := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%d\t%d\t%s\n", x.ID, x.State, cell(x.Project), cell(x.RoomID), x.Kind,
			cell(x.Name), x.FileCount, x.TotalBytes, x.CreatedAt.Format(time.DateTime))
	}
	return tw.Flush()
}

// printProposal shows what the owner approves: with full, every file's text.
func printProposal(w io.Writer, d rooms.ProposalDetail, full bool) {
	fmt.Fprintf(w, "Proposal      %s (%s)\n", d.ID, d.State)
	fmt.Fprintf(w, "Name          %s\n", review.Printable(d.Name))
	fmt.Fprintf(w, "Room          %s/%s\n", d.Project, d.RoomID)
	fmt.Fprintf(w, "Kind          %s\n", d.Kind)
	fmt.Fprintf(w, "Key           %s\n", d.IdempotencyKey)
	fmt.Fprintf(w, "Content hash  %s\n", d.ContentHash)
	if d.Kind == rooms.SourceRepo {
		fmt.Fprintf(w, "Repository    %s @ %s\n%s. %s\n", d.RepositoryID, d.VersionID, review.TextRepo, review.TextRepoNote)
	} else {
		fmt.Fprintf(w, "\nReview all proposed files (%d), %d bytes:\n", len(d.Files), d.TotalBytes)
		for _, path := range d.SortedPaths() {
			c := d.Files[path]
			fmt.Fprintf(w, "\n=== %s (%d bytes, %d lines) ===\n", path, len(c), review.LineCount(c))
			if full {
				txt := review.Printable(c)
				fmt.Fprint(w, txt)
				if !strings.HasSuffix(txt, "\n") {
					fmt.Fprintln(w, "\n[no newline at end of file]")
				}
			}
		}
	}
	if d.State == rooms.ProposalPending {
		fmt.Fprintf(w, "\n%s\n", review.TextApproval)
		if full {
			fmt.Fprintf(w, "Approve: roomrelay review approve %s --hash %s\nDecline: roomrelay review decline %s\n", d.ID, d.ContentHash, d.ID)
		}
	}
}

func reviewWeb(ctx context.Context, e *Env, s *rooms.Store, open bool) error {
	srv, err := review.Listen(s, e.Logger)
	if err != nil {
		return exitErr(ExitUnavailable, err)
	}
	fmt.Fprintf(e.Stdout, "Review page (this device only; the address holds a one-time token):\n\n  %s\n\nPress Ctrl-C to stop.\n", srv.URL())
	if open {
		if err := openBrowser(ctx, srv.URL()); err != nil {
			fmt.Fprintf(e.Stderr, "could not open a browser (%v); open the address above yourself\n", err)
		}
	}
	return srv.Run(ctx)
}

// openBrowser hands url to the desktop's opener, which returns once the
// browser has it.
func openBrowser(ctx context.Context, url string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, url)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
