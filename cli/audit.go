package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/relay"
)

func init() {
	Register(&Command{
		Name:     "audit",
		Synopsis: "[--project P] [--since T] [--limit N] [--json]",
		Summary:  "show the audit log of every command that reached this device",
		Help: `--since takes an RFC 3339 time or a duration back from now (e.g. 1h).
'roomrelay audit verify' checks the hash chain.`,
		Setup: setupAudit,
	})
	Register(&Command{
		Name:     "audit verify",
		Synopsis: "[--json]",
		Summary:  "verify the audit log's hash chain; names any edited, removed or reordered line",
		Setup:    setupAuditVerify,
	})
}

// setupAudit parses the flags of `roomrelay audit` and returns its runner.
func setupAudit(fs *flag.FlagSet, e *Env) Runner {
	paths := pathFlags(fs, e)
	project := fs.String("project", "", "only this project `id`")
	since := fs.String("since", "", "only entries at or after `T` (RFC 3339, or a duration like 24h)")
	limit := fs.Int("limit", 0, "at most `N` most recent entries (0: all)")
	asJSON := fs.Bool("json", false, "print JSON lines")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("unexpected argument %q (did you mean `audit verify`?)", args[0])
		}
		f := audit.Filter{Project: *project, Limit: *limit}
		if *since != "" {
			if d, err := time.ParseDuration(*since); err == nil {
				f.Since = time.Now().Add(-d)
			} else if t, err := time.Parse(time.RFC3339, *since); err == nil {
				f.Since = t
			} else {
				return usagef("--since %q: want RFC 3339 or a duration", *since)
			}
		}
		p, err := paths()
		if err != nil {
			return err
		}
		entries, err := audit.Query(filepath.Join(p.State, daemon.AuditDir), f)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(e.Stdout)
			for _, en := range entries {
				if err := enc.Encode(en); err != nil {
					return err
				}
			}
			return nil
		}
		printAudit(e, entries)
		return nil
	}
}

// setupAuditVerify parses the flags of `roomrelay audit verify` and returns its runner.
func setupAuditVerify(fs *flag.FlagSet, e *Env) Runner {
	paths := pathFlags(fs, e)
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		p, err := paths()
		if err != nil {
			return err
		}
		rep, err := audit.Verify(filepath.Join(p.State, daemon.AuditDir))
		if err != nil {
			return err
		}
		// No log at all, while the agent's dedupe store shows it ran
		// commands: the log was removed, which is not "OK".
		ran := 0
		if rep.Lines == 0 {
			if ran, err = agent.RecordedCommands(ctx, p.State); err != nil {
				return err
			}
		}
		// The hub's anchor: a log deleted, truncated or rewritten reads as
		// a gap here even when what is left verifies.
		gap, _, aerr := anchorGap(ctx, p, nil, "")
		if aerr != nil && !errors.Is(aerr, errNoAnchor) {
			fmt.Fprintf(e.Stderr, "note: could not compare with the hub's audit anchor: %s\n", relay.Printable(aerr.Error()))
		}
		if *asJSON {
			if rep.Files == nil {
				rep.Files = []string{}
			}
			if rep.Problems == nil {
				rep.Problems = []audit.Problem{}
			}
			out := struct {
				audit.Report
				OK          bool   `json:"ok"`
				RotatedAway uint64 `json:"rotated_away"`
				NoLog       bool   `json:"no_log,omitempty"`
				CommandsRan int    `json:"commands_ran,omitempty"`
				AnchorGap   string `json:"anchor_gap,omitempty"`
			}{rep, rep.OK() && ran == 0 && gap == "", rep.RotatedAway(), rep.Lines == 0 && ran > 0, ran, gap}
			if err := json.NewEncoder(e.Stdout).Encode(out); err != nil {
				return err
			}
		} else if gap != "" {
			fmt.Fprintf(e.Stdout, "audit log GAP: %s\n", gap)
		} else {
			printVerify(e, rep, ran)
		}
		if !rep.OK() || ran > 0 || gap != "" {
			return silent(ExitFailure)
		}
		return nil
	}
}

func printAudit(e *Env, entries []audit.Entry) {
	if len(entries) == 0 {
		fmt.Fprintln(e.Stdout, "no audit entries")
		return
	}
	tw := tabwriter.NewWriter(e.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tPROJECT\tROOM\tCOMMAND\tDECISION\tERROR\tMS")
	for _, en := range entries {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", en.Seq, en.Time.Local().Format(time.DateTime), cell(en.Project), cell(en.Room), cell(en.Command), en.Decision, cell(en.ErrorCode), en.DurationMS)
	}
	tw.Flush()
}

func printVerify(e *Env, rep audit.Report, ran int) {
	switch {
	case rep.Lines == 0 && ran > 0:
		fmt.Fprintf(e.Stdout, "no audit log, but the agent's dedupe store holds %d command(s) that ran: the log was removed\n", ran)
		return
	case rep.Lines == 0 && rep.OK():
		fmt.Fprintln(e.Stdout, "no audit log: no command has reached this device")
		return
	case rep.OK() && rep.RotatedAway() > 0:
		fmt.Fprintf(e.Stdout, "audit log PARTIAL: chain intact for seq %d..%d (%d lines in %d file(s)), but seq 1..%d were rotated away and are not kept; last hash %.16s…\n",
			rep.FirstSeq, rep.LastSeq, rep.Lines, len(rep.Files), rep.RotatedAway(), rep.LastHash)
		return
	case rep.OK():
		fmt.Fprintf(e.Stdout, "audit log OK: %d lines (seq %d..%d) in %d file(s), chain intact, last hash %.16s…\n", rep.Lines, rep.FirstSeq, rep.LastSeq, len(rep.Files), rep.LastHash)
		return
	}
	fmt.Fprintf(e.Stdout, "audit log BROKEN: %d problem(s)\n", len(rep.Problems))
	for _, pr := range rep.Problems {
		fmt.Fprintf(e.Stdout, "  %s\n", pr)
	}
}
