package rooms

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/roomrelay/roomrelay/relay"
)

// checkPendingBounds refuses a new proposal when np's Room or project
// already holds as many pending proposals as np allows: a caller (or a
// prompt-injected coding agent) proposing distinct snippets again and again
// would otherwise grow rooms.db and the owner's review queue without end.
// It runs inside the create transaction, under the store's write lock, so
// concurrent proposals cannot overshoot. The code is rate_limited: the
// owner's limit for the project was reached and a retry helps only later,
// once the owner has reviewed; busy would say "retry shortly", which a full
// queue does not warrant.
func checkPendingBounds(ctx context.Context, tx *sql.Tx, np NewProposal) error {
	if np.MaxPendingInRoom > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM proposals WHERE room_id = ? AND state = 'pending'`,
			np.RoomID).Scan(&n); err != nil {
			return fmt.Errorf("rooms: count pending proposals: %w", err)
		}
		if n >= np.MaxPendingInRoom {
			return relay.Errorf(relay.CodeRateLimited,
				"%d proposals already wait for review in room %q (the device owner allows %d per room): ask the owner to review them on the device (`roomrelay review`) before proposing more",
				n, np.RoomID, np.MaxPendingInRoom)
		}
	}
	if np.MaxPendingInProject > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM proposals p JOIN rooms r ON r.id = p.room_id
			WHERE r.project_id = ? AND p.state = 'pending'`, np.ProjectID).Scan(&n); err != nil {
			return fmt.Errorf("rooms: count pending proposals: %w", err)
		}
		if n >= np.MaxPendingInProject {
			return relay.Errorf(relay.CodeRateLimited,
				"%d proposals already wait for review in project %q (the device owner allows %d per project): ask the owner to review them on the device (`roomrelay review`) before proposing more",
				n, np.ProjectID, np.MaxPendingInProject)
		}
	}
	return nil
}
