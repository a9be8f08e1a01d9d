package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/rooms"
)

// reviewApprove approves proposal id. With hash, exactly that content; on
// a terminal without it, what the owner was just shown, once they say yes;
// otherwise not at all: a script must name the hash its owner reviewed.
func reviewApprove(ctx context.Context, e *Env, open func(context.Context) (*rooms.Store, error), live *localapi.Client, id, hash string) error {
	if hash == "" && !isTerminal(e.Stdin) {
		// The hash is not in this message: reading it from here would
		// approve without anyone having read the files.
		return usagef("without a terminal, give --hash HASH: the content hash you reviewed, as `roomrelay review show %s` prints it", id)
	}
	s, err := open(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	if hash == "" {
		d, err := s.GetProposal(ctx, id)
		if err != nil {
			return err
		}
		if d.State != rooms.ProposalPending {
			return fmt.Errorf("not approved: %s was already %s: %w", d.ID, d.State, rooms.ErrNotPending)
		}
		var b bytes.Buffer
		printProposal(&b, d, false)
		pageText(e, b.String())
		q := fmt.Sprintf("Approve %q for room %s/%s? [y/N] ", cell(d.Name), cell(d.Project), cell(d.RoomID))
		answer, yes := confirm(ctx, e, q)
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("not approved: interrupted; nothing changed: %w", ctx.Err())
		case !yes && answer == "":
			return errors.New("not approved (no answer; only y or yes approves): nothing changed")
		case !yes:
			return fmt.Errorf("not approved (answer %q; only y or yes approves): nothing changed", cell(answer))
		}
		hash = d.ContentHash
	}
	if live != nil {
		// The running agent decides (one writer), audits decided_via cli
		// and tells the hub at once.
		defer live.Close()
		var dr localapi.DecisionResponse
		if _, err := live.Do(ctx, "POST", "proposals/"+id+"/approve", localapi.DecideRequest{ContentHash: hash, DecidedVia: localapi.ViaCLI}, &dr, nil); err != nil {
			return apiFailure("approved", err)
		}
		ap := dr.Proposal
		fmt.Fprintf(e.Stdout, "approved %s: %q is in the launcher of room %s/%s, instance_id %s (hash %s).\n",
			ap.ID, ap.Name, ap.Project, ap.RoomID, ap.InstanceID, ap.ContentHash)
		fmt.Fprintln(e.Stdout, "The running agent approved it and told the hub.")
		return nil
	}
	ap, err := s.ApproveProposal(ctx, id, hash)
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
