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
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/agent/localapi"
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
	open, _ := reviewStoreAndPaths(flags, e)
	return open
}

// reviewStoreAndPaths is reviewStoreFlags that also returns the paths (to
// find a running agent's local API).
func reviewStoreAndPaths(flags *flag.FlagSet, e *Env) (func(context.Context) (*rooms.Store, error), func() (device.Paths, error)) {
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
	}, paths
}

const reviewHelp = `Proposals from the cloud wait here, pending: not in the launcher, not
openable, not smoke-runnable, until the owner approves that exact content on
this device. 'review show' prints every file in full and the content hash;
'review approve' binds the approval to that hash and is refused if the
content is not what was shown. The running agent tells the hub within its
tick, so a cloud caller waiting on the proposal learns of it at once.

With --web, serves a review page on 127.0.0.1 on a random port and prints
its address, which holds a one-time session token; it runs until Ctrl-C.
The page numbers and highlights every file, and checks a pending snippet in
the sandbox before its buttons (rules, build, smoke-run, as 'snippet check'
does; it never fetches the React runtime: see 'snippet fetch-runtime').
Control characters, bidi controls and invisible characters in files are
shown as <U+XXXX> markers, with a warning before the files.`

func init() {
	Register(&Command{
		Name:     "review",
		Synopsis: "[--web [--open]] | list | show ID | approve ID | decline ID",
		Summary:  "review proposals on this device: list, show, approve, decline, or a local web page",
		Help:     reviewHelp,
		Setup:    setupReview,
	})
	Register(&Command{
		Name:     "review list",
		Synopsis: "[--all] [--json]",
		Summary:  "list proposals waiting for review (--all: decided ones too)",
		Setup:    setupReviewList,
	})
	Register(&Command{
		Name:     "review show",
		Synopsis: "ID [--json]",
		Summary:  "print a proposal with every file in full, its sizes and content hash",
		Setup:    setupReviewShow,
	})
	Register(&Command{
		Name:     "review approve",
		Synopsis: "ID [--hash H]",
		Summary:  "approve a proposal: its app enters the Room's launcher",
		Help: `Approves the content with hash H (as 'review show' prints it) and refuses if
the proposal's content is not that.

Without --hash, on a terminal: shows every file in full (through $PAGER or
less when long), then asks "Approve NAME for room ROOM? [y/N]"; only y or yes
approves, and only the content shown. Without --hash and without a terminal
(a script, a pipe) it refuses: a script approves the hash its owner read.`,
		Setup: setupReviewApprove,
	})
	Register(&Command{
		Name:     "review decline",
		Synopsis: "ID",
		Summary:  "decline a proposal: its files are discarded, its key stays spent",
		Setup:    setupReviewDecline,
	})
}

// setupReview parses the flags of `roomrelay review` and returns its runner.
func setupReview(fs *flag.FlagSet, e *Env) Runner {
	open := reviewStoreFlags(fs, e)
	web := fs.Bool("web", false, "serve the review page on 127.0.0.1 (random port) until interrupted")
	openPage := fs.Bool("open", false, "with --web: open the page in the default browser (through a 0600 launch page: the token never reaches a command line)")
	rf := reviewRuntimeFlags(fs, e)
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
		return reviewWeb(ctx, e, s, *openPage, rf)
	}
}

// setupReviewList parses the flags of `roomrelay review list` and returns its runner.
func setupReviewList(fs *flag.FlagSet, e *Env) Runner {
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
}

// setupReviewShow parses the flags of `roomrelay review show` and returns its runner.
func setupReviewShow(fs *flag.FlagSet, e *Env) Runner {
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
}

// setupReviewApprove parses the flags of `roomrelay review approve` and returns its runner.
func setupReviewApprove(fs *flag.FlagSet, e *Env) Runner {
	open, paths := reviewStoreAndPaths(fs, e)
	hash := fs.String("hash", "", "the content `hash` that was reviewed (needed without a terminal)")
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("give one proposal ID (see `roomrelay review list`)")
		}
		p, err := paths()
		if err != nil {
			return err
		}
		return reviewApprove(ctx, e, open, liveAgent(ctx, e, p), args[0], *hash)
	}
}

// setupReviewDecline parses the flags of `roomrelay review decline` and returns its runner.
func setupReviewDecline(fs *flag.FlagSet, e *Env) Runner {
	open, paths := reviewStoreAndPaths(fs, e)
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("give one proposal ID (see `roomrelay review list`)")
		}
		p, err := paths()
		if err != nil {
			return err
		}
		if c := liveAgent(ctx, e, p); c != nil {
			defer c.Close()
			var dr localapi.DecisionResponse
			if _, err := c.Do(ctx, "POST", "proposals/"+args[0]+"/decline", localapi.DecideRequest{DecidedVia: localapi.ViaCLI}, &dr, nil); err != nil {
				return apiFailure("declined", err)
			}
			fmt.Fprintf(e.Stdout, "declined %s: %q was discarded; its idempotency key stays spent.\n", dr.Proposal.ID, dr.Proposal.Name)
			return nil
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

// printProposal shows what the owner approves, every file in full; hints
// adds the commands that decide it.
func printProposal(w io.Writer, d rooms.ProposalDetail, hints bool) {
	fmt.Fprintf(w, "Proposal      %s (%s)\n", d.ID, d.State)
	fmt.Fprintf(w, "Name          %s\n", cell(d.Name))
	fmt.Fprintf(w, "Room          %s/%s\n", cell(d.Project), cell(d.RoomID))
	fmt.Fprintf(w, "Kind          %s\n", d.Kind)
	fmt.Fprintf(w, "Proposed by   %s\n", cell(review.ProposedBy(d.Proposal)))
	fmt.Fprintf(w, "Arrived       %s\n", d.CreatedAt.UTC().Format(review.TimeFormat))
	fmt.Fprintf(w, "Key           %s\n", d.IdempotencyKey)
	fmt.Fprintf(w, "Content hash  %s\n", d.ContentHash)
	if d.Kind == rooms.SourceRepo {
		fmt.Fprintf(w, "Repository    %s @ %s\n%s. %s\n", d.RepositoryID, d.VersionID, review.TextRepo, review.TextRepoNote)
	} else {
		printHiddenBanner(w, d)
		fmt.Fprintf(w, "\nReview all proposed files (%d), %d bytes:\n", len(d.Files), d.TotalBytes)
		for _, path := range d.SortedPaths() {
			c := d.Files[path]
			fmt.Fprintf(w, "\n=== %s (%d bytes, %d lines) ===\n", cell(path), len(c), review.LineCount(c))
			txt := review.Printable(c)
			fmt.Fprint(w, txt)
			if txt != "" && !strings.HasSuffix(txt, "\n") {
				fmt.Fprintln(w, "\n[no newline at end of file]")
			}
		}
	}
	if d.State == rooms.ProposalPending {
		fmt.Fprintf(w, "\n%s\n", review.TextApproval)
		if hints {
			fmt.Fprintf(w, "Approve: roomrelay review approve %s --hash %s\nDecline: roomrelay review decline %s\n", d.ID, d.ContentHash, d.ID)
		}
	}
}

// printHiddenBanner warns before the files when any holds characters
// Printable marks, naming each file, as the review page does.
func printHiddenBanner(w io.Writer, d rooms.ProposalDetail) {
	var lines []string
	if h := review.ScanHidden(d.Name); h.Any() {
		lines = append(lines, "the proposal's name: "+h.String())
	}
	for _, path := range d.SortedPaths() {
		if h := review.ScanHidden(d.Files[path]); h.Any() {
			lines = append(lines, cell(path)+": "+h.String())
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "\n!! WARNING  %s\n", review.HiddenWarning)
	for _, l := range lines {
		fmt.Fprintf(w, "!!   %s\n", l)
	}
}
