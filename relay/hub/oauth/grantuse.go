package oauth

import (
	"context"
	"errors"
	"time"
)

// A grant's last use, as `hub oauth grants` shows it (like a client
// token's in `hub token list`): moved by every verified access token, not
// only by code exchanges and refreshes, but written at most once a
// lastUseEvery per grant, so verifying stays two reads. The grant record
// VerifyAccess has just read says when it was last written; concurrent
// requests and nodes meet in the compare-and-set, and the later ones skip.

// lastUseEvery bounds how often a grant's last_used is rewritten.
const lastUseEvery = time.Minute

// noteGrantUse records that g was used now, when its record is older
// than lastUseEvery. A failure is logged, never the request's: last_used
// is a hint, not an audit trail.
func (s *Server) noteGrantUse(ctx context.Context, g *grantRec) {
	now := s.cfg.Now().UTC()
	if now.Sub(g.LastUsed) < lastUseEvery {
		return
	}
	_, err := update(context.WithoutCancel(ctx), s.st, grantKey(g.ID), func(g *grantRec) error {
		if g.Revoked || now.Sub(g.LastUsed) < lastUseEvery {
			return errSkip
		}
		g.LastUsed = now
		return nil
	})
	if err != nil && !notFound(err) && !errors.Is(err, errSkip) {
		s.log.Warn("record the grant's use", "grant", g.ID, "err", err)
	}
}
