package rooms

import (
	"context"
	"fmt"
	"time"
)

// UnannouncedDecisions returns approved or declined proposals whose decision
// the agent has not yet queued for the hub, oldest decision first.
func (s *Store) UnannouncedDecisions(ctx context.Context) ([]Proposal, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+proposalColumns+`
		FROM proposals p JOIN rooms r ON r.id = p.room_id
		WHERE p.announced_at IS NULL AND p.state != 'pending'
		ORDER BY p.decided_at, p.id`)
	if err != nil {
		return nil, fmt.Errorf("rooms: unannounced decisions: %w", err)
	}
	defer rows.Close()
	var out []Proposal
	for rows.Next() {
		p, err := scanProposal(rows)
		if err != nil {
			return nil, fmt.Errorf("rooms: unannounced decisions: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// MarkAnnounced records that the decision on proposal id was queued for the hub.
func (s *Store) MarkAnnounced(ctx context.Context, id string) error {
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := s.db.ExecContext(ctx, `UPDATE proposals SET announced_at = ? WHERE id = ? AND announced_at IS NULL`,
		time.Now().UnixMilli(), id); err != nil {
		return fmt.Errorf("rooms: mark %s announced: %w", id, err)
	}
	return nil
}
