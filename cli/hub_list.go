package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
)

// adminList is the shape every `roomrelay hub … list` command shares: no
// arguments, one admin call, --json prints the API's list body, otherwise a
// table, or a hint on stderr when the list is empty.
type adminList[T any] struct {
	fetch  func(ctx context.Context, cl *hubclient.Client) ([]T, error)
	body   func([]T) any // the --json body
	empty  string        // printed on stderr for an empty list
	header []string
	row    func(T) []string // one cell per header column, already printable
}

// runner adds the admin client and --json flags to fs and returns the command.
func (l adminList[T]) runner(fs *flag.FlagSet, e *Env) Runner {
	c := adminClientFlags(fs, e)
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("no arguments are taken")
		}
		cl, err := c()
		if err != nil {
			return err
		}
		items, err := l.fetch(ctx, cl)
		if err != nil {
			return hubCallErr(err)
		}
		if *asJSON {
			return json.NewEncoder(e.Stdout).Encode(l.body(items))
		}
		if len(items) == 0 {
			fmt.Fprintln(e.Stderr, l.empty)
			return nil
		}
		tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(l.header, "\t"))
		for _, it := range items {
			fmt.Fprintln(tw, strings.Join(l.row(it), "\t"))
		}
		return tw.Flush()
	}
}

// adminOne is the shape of a `roomrelay hub …` command that acts on one id:
// exactly one argument (else usage, which says where ids are listed), the
// admin client, then do with that id. do wraps a hub refusal with hubCallErr.
func adminOne(fs *flag.FlagSet, e *Env, usage string, do func(ctx context.Context, cl *hubclient.Client, id string) error) Runner {
	c := adminClientFlags(fs, e)
	return func(ctx context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("%s", usage)
		}
		cl, err := c()
		if err != nil {
			return err
		}
		return do(ctx, cl, args[0])
	}
}
