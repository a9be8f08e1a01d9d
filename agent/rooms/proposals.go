package rooms

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// Proposals is the review gate's storage: proposals wait here, pending,
// until the owner approves or declines them on the device. A desktop-app
// adapter can implement it alongside Rooms.
type Proposals interface {
	CreateProposal(ctx context.Context, np NewProposal) (Proposal, bool, error)
	ListProposals(ctx context.Context, f ProposalFilter) ([]Proposal, error)
	GetProposal(ctx context.Context, id string) (ProposalDetail, error)
	ApproveProposal(ctx context.Context, id, contentHash string) (Proposal, error)
	DeclineProposal(ctx context.Context, id string) (Proposal, error)
	Decide(ctx context.Context, id string, d Decision) (Proposal, error)
}

// Decision is the owner's decision on a pending proposal and how it was
// made. The proposal keeps Via (Proposal.DecidedVia), so whoever reads the
// decision later knows it: the daemon publishes proposal_decided only for
// a decision without one, the local API having told local apps of its own
// at once.
type Decision struct {
	Approve bool
	// ContentHash is the hash of the content the owner reviewed (approve
	// only): another one is ErrContentChanged.
	ContentHash string
	// Via is the channel the owner decided through, as the local API names
	// it (app, cli); "" on the review page and the CLI on the store.
	Via string
}

// maxViaLen bounds Decision.Via.
const maxViaLen = 16

// Proposal states.
const (
	ProposalPending  = "pending"
	ProposalApproved = "approved"
	ProposalDeclined = "declined"
)

// NewProposal is a proposal as a propose_room_* handler stores it, after
// validation in relay.
type NewProposal struct {
	ProjectID      string
	RoomID         string
	Kind           Source // SourceSnippet or SourceRepo
	Name           string
	Files          map[string]string // snippet
	RepositoryID   string            // repo
	VersionID      string            // repo
	IdempotencyKey string
	// ProposedBy is who sent it, as the hub named the caller
	// (relay.Command.Caller); for the owner's eyes only.
	ProposedBy string
	// Provider is whose room RoomID must be: ProviderBuiltin ("" too), or
	// ProviderApp (the desktop app's directory as last sent; the room
	// need not be reachable now).
	Provider string
	// ContentHash is what the owner's approval binds to. Leave it empty to
	// have it derived (ProposalContentHash); if set it must equal that.
	ContentHash string
	// MaxPendingInRoom and MaxPendingInProject bound the proposals left
	// pending in the Room and in its project (0: no bound); a new proposal
	// beyond either is refused with rate_limited. A retry of a stored
	// proposal is not new and is answered as before.
	MaxPendingInRoom    int
	MaxPendingInProject int
}

// Proposal is a stored proposal without its files.
type Proposal struct {
	ID             string    `json:"id"`
	Project        string    `json:"project"`
	RoomID         string    `json:"room_id"`
	Kind           Source    `json:"kind"`
	Name           string    `json:"name"`
	RepositoryID   string    `json:"repository_id,omitempty"`
	VersionID      string    `json:"version_id,omitempty"`
	IdempotencyKey string    `json:"idempotency_key"`
	ContentHash    string    `json:"content_hash"`
	State          string    `json:"state"`
	FileCount      int       `json:"file_count"`
	TotalBytes     int64     `json:"total_bytes"`
	CreatedAt      time.Time `json:"created_at"`
	DecidedAt      time.Time `json:"decided_at,omitzero"`
	InstanceID     string    `json:"instance_id,omitempty"` // the app an approval created
	ProposedBy     string    `json:"proposed_by,omitempty"` // the caller as the hub named it
	// DecidedVia is Decision.Via of the decision; not part of the local
	// API's proposal (proposal_decided carries it).
	DecidedVia string `json:"-"`
	// InstallState is an approved proposal's install (InstallPending,
	// InstallInstalled, InstallFailed); InstallError says why it failed.
	// Both are empty before a decision and for a declined proposal.
	InstallState string `json:"install_state,omitempty"`
	InstallError string `json:"install_error,omitempty"`
}

// ProposalDetail is a proposal with every file, for the owner's review. A
// declined proposal has no files left.
type ProposalDetail struct {
	Proposal
	Files map[string]string `json:"files"`
}

// ProposalFilter selects proposals; empty fields match everything.
type ProposalFilter struct {
	ProjectID string
	RoomID    string
	State     string
}

// Errors of the review transitions (local to the device, not wire errors).
var (
	// ErrContentChanged: the hash the reviewer saw is not the stored one.
	ErrContentChanged = errors.New("the proposal's content is not what was reviewed")
	// ErrNotPending: the proposal was already approved or declined.
	ErrNotPending = errors.New("the proposal is no longer pending")
)

// ProposalContentHash is the hash an approval binds to. For a snippet it is
// relay.ContentHash of the files; for a repository version it is the
// SHA-256 of the netstring encoding
// ns("roomrelay-repo-content-v1") ns(repository_id) ns(version_id).
func ProposalContentHash(kind Source, files map[string]string, repositoryID, versionID string) string {
	if kind == SourceSnippet {
		return relay.ContentHash(files)
	}
	var b []byte
	for _, s := range []string{"roomrelay-repo-content-v1", repositoryID, versionID} {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
		b = append(b, ',')
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

const proposalColumns = `p.id, r.project_id, p.room_id, p.kind, p.name, p.repository_id, p.version_id,
	p.idempotency_key, p.content_hash, p.state, p.created_at, p.decided_at, coalesce(p.instance_id, ''), p.proposed_by, p.decided_via,
	(SELECT count(*) FROM proposal_files f WHERE f.proposal_id = p.id),
	(SELECT coalesce(sum(length(CAST(f.content AS BLOB))), 0) FROM proposal_files f WHERE f.proposal_id = p.id),
	coalesce((SELECT ins.state FROM installs ins WHERE ins.proposal_id = p.id), ''),
	coalesce((SELECT ins.error FROM installs ins WHERE ins.proposal_id = p.id), '')`

type scanner interface{ Scan(dest ...any) error }

func scanProposal(row scanner) (Proposal, error) {
	var p Proposal
	var created int64
	var decided sql.NullInt64
	err := row.Scan(&p.ID, &p.Project, &p.RoomID, &p.Kind, &p.Name, &p.RepositoryID, &p.VersionID,
		&p.IdempotencyKey, &p.ContentHash, &p.State, &created, &decided, &p.InstanceID, &p.ProposedBy, &p.DecidedVia,
		&p.FileCount, &p.TotalBytes, &p.InstallState, &p.InstallError)
	if err != nil {
		return Proposal{}, err
	}
	p.CreatedAt = time.UnixMilli(created).UTC()
	p.DecidedAt = fromMS(decided)
	return p, nil
}

func (s *Store) proposal(ctx context.Context, q queryer, id string) (Proposal, error) {
	p, err := scanProposal(q.QueryRowContext(ctx,
		`SELECT `+proposalColumns+` FROM proposals p JOIN rooms r ON r.id = p.room_id WHERE p.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Proposal{}, relay.Errorf(relay.CodeNotFound, "no proposal %q", id)
	}
	if err != nil {
		return Proposal{}, fmt.Errorf("rooms: read proposal %q: %w", id, err)
	}
	return p, nil
}

// CreateProposal stores a pending proposal. A retry (same idempotency key in
// the same Room, same kind, name and content) returns the stored proposal and
// duplicate=true, whatever its state: a key stays spent after a decline. The
// same key with anything else is idempotency_conflict. Another key with the
// same kind, name and content as a proposal still pending in the Room also
// returns that proposal with duplicate=true (content dedupe).
func (s *Store) CreateProposal(ctx context.Context, np NewProposal) (Proposal, bool, error) {
	if err := checkSource(np.Kind, np.Files, np.RepositoryID, np.VersionID); err != nil {
		return Proposal{}, false, err
	}
	if np.Name == "" || np.IdempotencyKey == "" {
		return Proposal{}, false, relay.Errorf(relay.CodeInvalidArgs, "a proposal needs a name and an idempotency_key")
	}
	hash := ProposalContentHash(np.Kind, np.Files, np.RepositoryID, np.VersionID)
	if np.ContentHash != "" && np.ContentHash != hash {
		return Proposal{}, false, fmt.Errorf("rooms: create proposal: content hash %q does not match the files (%q)", np.ContentHash, hash)
	}
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return Proposal{}, false, err
	}
	defer unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Proposal{}, false, fmt.Errorf("rooms: create proposal: %w", err)
	}
	defer tx.Rollback()
	want := np.Provider
	if want == "" {
		want = ProviderBuiltin
	}
	r, err := s.room(ctx, tx, np.RoomID)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && (r.Project != np.ProjectID || r.provider != want || r.gone)) {
		return Proposal{}, false, roomNotFound(np.RoomID)
	}
	if err != nil {
		return Proposal{}, false, err
	}
	var existingID string
	err = tx.QueryRowContext(ctx, `SELECT id FROM proposals WHERE room_id = ? AND idempotency_key = ?`,
		np.RoomID, np.IdempotencyKey).Scan(&existingID)
	switch {
	case err == nil:
		p, err := s.proposal(ctx, tx, existingID)
		if err != nil {
			return Proposal{}, false, err
		}
		if p.ContentHash != hash || p.Kind != np.Kind || p.Name != np.Name {
			return Proposal{}, false, relay.Errorf(relay.CodeIdempotencyConflict,
				"idempotency_key %q was already used in room %q for other content (proposal %s)", np.IdempotencyKey, np.RoomID, p.ID)
		}
		return p, true, nil
	case !errors.Is(err, sql.ErrNoRows):
		return Proposal{}, false, fmt.Errorf("rooms: create proposal: %w", err)
	}
	// Content dedupe: a retry with a fresh key (a client that lost the
	// answer and drew a new random key) must not give the owner a second
	// card for the same content while the first still waits.
	err = tx.QueryRowContext(ctx, `SELECT id FROM proposals WHERE room_id = ? AND state = 'pending'
		AND kind = ? AND name = ? AND content_hash = ? ORDER BY created_at, id LIMIT 1`,
		np.RoomID, string(np.Kind), np.Name, hash).Scan(&existingID)
	switch {
	case err == nil:
		p, err := s.proposal(ctx, tx, existingID)
		if err != nil {
			return Proposal{}, false, err
		}
		return p, true, nil
	case !errors.Is(err, sql.ErrNoRows):
		return Proposal{}, false, fmt.Errorf("rooms: create proposal: %w", err)
	}
	if err := checkPendingBounds(ctx, tx, np); err != nil {
		return Proposal{}, false, err
	}
	id := newID("prop_")
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO proposals (id, room_id, kind, name, repository_id, version_id, idempotency_key,
		                       content_hash, state, created_at, proposed_by)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)`,
		id, np.RoomID, string(np.Kind), np.Name, np.RepositoryID, np.VersionID, np.IdempotencyKey,
		hash, ms(s.now()), np.ProposedBy); err != nil {
		return Proposal{}, false, fmt.Errorf("rooms: create proposal: %w", err)
	}
	for path, content := range np.Files {
		if _, err := tx.ExecContext(ctx, `INSERT INTO proposal_files (proposal_id, path, content) VALUES (?, ?, ?)`,
			id, path, content); err != nil {
			return Proposal{}, false, fmt.Errorf("rooms: create proposal: file %q: %w", path, err)
		}
	}
	p, err := s.proposal(ctx, tx, id)
	if err != nil {
		return Proposal{}, false, err
	}
	if err := tx.Commit(); err != nil {
		return Proposal{}, false, fmt.Errorf("rooms: create proposal: %w", err)
	}
	s.log.InfoContext(ctx, "rooms: proposal stored for review", "proposal", id, "room", np.RoomID, "kind", string(np.Kind))
	return p, false, nil
}

// ListProposals returns proposals matching f, oldest first.
func (s *Store) ListProposals(ctx context.Context, f ProposalFilter) ([]Proposal, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+proposalColumns+`
		FROM proposals p JOIN rooms r ON r.id = p.room_id
		WHERE (? = '' OR r.project_id = ?) AND (? = '' OR p.room_id = ?) AND (? = '' OR p.state = ?)
		ORDER BY p.created_at, p.id`,
		f.ProjectID, f.ProjectID, f.RoomID, f.RoomID, f.State, f.State)
	if err != nil {
		return nil, fmt.Errorf("rooms: list proposals: %w", err)
	}
	defer rows.Close()
	var out []Proposal
	for rows.Next() {
		p, err := scanProposal(rows)
		if err != nil {
			return nil, fmt.Errorf("rooms: list proposals: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rooms: list proposals: %w", err)
	}
	return out, nil
}

// GetProposal returns a proposal with all its files, for the owner's review
// on the device. It must never be sent to the hub.
func (s *Store) GetProposal(ctx context.Context, id string) (ProposalDetail, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return ProposalDetail{}, fmt.Errorf("rooms: read proposal %q: %w", id, err)
	}
	defer tx.Rollback()
	p, err := s.proposal(ctx, tx, id)
	if err != nil {
		return ProposalDetail{}, err
	}
	files, err := readFiles(ctx, tx, `SELECT path, content FROM proposal_files WHERE proposal_id = ?`, id)
	if err != nil {
		return ProposalDetail{}, err
	}
	return ProposalDetail{Proposal: p, Files: files}, nil
}

// SortedPaths returns the paths of d's files in byte order, the order a
// reviewer is shown them.
func (d ProposalDetail) SortedPaths() []string {
	ps := make([]string, 0, len(d.Files))
	for p := range d.Files {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// decide runs one review transition of a pending proposal in a single write
// transaction: body changes the rows, and the proposal is read back as it
// now stands before the commit.
func (s *Store) decide(ctx context.Context, verb, id, via string, body func(tx *sql.Tx, p Proposal) error) (Proposal, error) {
	if len(via) > maxViaLen {
		return Proposal{}, fmt.Errorf("rooms: %s proposal %q: decided via %q: longer than %d bytes", verb, id, relay.Clip(via, maxViaLen), maxViaLen)
	}
	unlock, err := s.lockWrite(ctx)
	if err != nil {
		return Proposal{}, err
	}
	defer unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Proposal{}, fmt.Errorf("rooms: %s proposal %q: %w", verb, id, err)
	}
	defer tx.Rollback()
	p, err := s.proposal(ctx, tx, id)
	if err != nil {
		return Proposal{}, err
	}
	if p.State != ProposalPending {
		return Proposal{}, fmt.Errorf("rooms: %s proposal %q: %w (it is %s)", verb, id, ErrNotPending, p.State)
	}
	if err := body(tx, p); err != nil {
		return Proposal{}, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE proposals SET decided_via = ? WHERE id = ?`, via, id); err != nil {
		return Proposal{}, fmt.Errorf("rooms: %s proposal %q: %w", verb, id, err)
	}
	if p, err = s.proposal(ctx, tx, id); err != nil {
		return Proposal{}, err
	}
	if err := tx.Commit(); err != nil {
		return Proposal{}, fmt.Errorf("rooms: %s proposal %q: %w", verb, id, err)
	}
	return p, nil
}

// ApproveProposal turns a pending proposal into an app at the end of its
// Room's launcher, in one transaction. contentHash is the hash of the content
// the owner was shown; if it is not the stored one the approval is refused
// (ErrContentChanged), so approving one set of files can never create an app
// from another.
func (s *Store) ApproveProposal(ctx context.Context, id, contentHash string) (Proposal, error) {
	return s.Decide(ctx, id, Decision{Approve: true, ContentHash: contentHash})
}

// Decide approves (as ApproveProposal) or declines (as DeclineProposal)
// pending proposal id, keeping d.Via with the decision in the same
// transaction.
func (s *Store) Decide(ctx context.Context, id string, d Decision) (Proposal, error) {
	if d.Approve {
		return s.approve(ctx, id, d.ContentHash, d.Via)
	}
	return s.decline(ctx, id, d.Via)
}

func (s *Store) approve(ctx context.Context, id, contentHash, via string) (Proposal, error) {
	p, err := s.decide(ctx, "approve", id, via, func(tx *sql.Tx, p Proposal) error {
		if contentHash != p.ContentHash {
			return fmt.Errorf("rooms: approve proposal %q: %w: reviewed %q, stored %q; review it again",
				id, ErrContentChanged, contentHash, p.ContentHash)
		}
		files, err := readFiles(ctx, tx, `SELECT path, content FROM proposal_files WHERE proposal_id = ?`, id)
		if err != nil {
			return err
		}
		// Check the stored files against the stored hash too: what becomes
		// the app is exactly what the hash names.
		if got := ProposalContentHash(p.Kind, files, p.RepositoryID, p.VersionID); got != p.ContentHash {
			return fmt.Errorf("rooms: approve proposal %q: %w: stored files hash to %q", id, ErrContentChanged, got)
		}
		now := s.now()
		instanceID := newID("app_")
		r, err := s.room(ctx, tx, p.RoomID)
		if err != nil {
			return fmt.Errorf("rooms: approve proposal %q: %w", id, err)
		}
		// The install row commits with the decision. A builtin room's app
		// is created here, so it is installed at once; the desktop app's
		// install queue delivers an app-provided room's.
		install := InstallInstalled
		if r.provider == ProviderApp {
			install = InstallPending
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO installs (proposal_id, instance_id, state, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?)`, id, instanceID, install, ms(now), ms(now)); err != nil {
			return fmt.Errorf("rooms: approve proposal %q: install row: %w", id, err)
		}
		if install == InstallPending {
			if _, err := tx.ExecContext(ctx,
				`UPDATE proposals SET state = 'approved', decided_at = ?, instance_id = ? WHERE id = ?`,
				ms(now), instanceID, id); err != nil {
				return fmt.Errorf("rooms: approve proposal %q: %w", id, err)
			}
			return nil
		}
		a := appRow{
			instanceID: instanceID, roomID: p.RoomID, name: p.Name, source: p.Kind,
			repositoryID: p.RepositoryID, versionID: p.VersionID, contentHash: p.ContentHash,
			review: ReviewApproved, reviewedAt: now, proposalID: p.ID,
		}
		if err := s.insertApp(ctx, tx, a, files); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx,
			`UPDATE proposals SET state = 'approved', decided_at = ?, instance_id = ? WHERE id = ?`,
			ms(now), instanceID, id); err != nil {
			return fmt.Errorf("rooms: approve proposal %q: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return Proposal{}, err
	}
	s.log.InfoContext(ctx, "rooms: proposal approved", "proposal", id, "instance_id", p.InstanceID)
	return p, nil
}

// DeclineProposal discards a pending proposal's files. The proposal row stays
// so its idempotency key remains spent.
func (s *Store) DeclineProposal(ctx context.Context, id string) (Proposal, error) {
	return s.Decide(ctx, id, Decision{})
}

func (s *Store) decline(ctx context.Context, id, via string) (Proposal, error) {
	p, err := s.decide(ctx, "decline", id, via, func(tx *sql.Tx, _ Proposal) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM proposal_files WHERE proposal_id = ?`, id); err != nil {
			return fmt.Errorf("rooms: decline proposal %q: %w", id, err)
		}
		if _, err := tx.ExecContext(ctx,
			`UPDATE proposals SET state = 'declined', decided_at = ? WHERE id = ?`, ms(s.now()), id); err != nil {
			return fmt.Errorf("rooms: decline proposal %q: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return Proposal{}, err
	}
	s.log.InfoContext(ctx, "rooms: proposal declined", "proposal", id)
	return p, nil
}
