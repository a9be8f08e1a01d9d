package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Store is where the authorization server keeps its records: six tables
// of keyed values with revisions, each record carrying its own expiry.
// The hub's JetStream buckets are one implementation (NewJetStreamStore,
// the rr_oauth_* buckets), MemStore the other (one process, for tests and
// for a hub that keeps OAuth state in memory). Everything the server
// decides (code replay, refresh rotation and its grace, revocation, the
// bounds of #29) is written against this interface, so it is tested
// without NATS; the NATS tests and the cluster test keep the real thing.
type Store interface {
	// Get returns key's value and revision, or ErrNotFound.
	Get(ctx context.Context, t Table, key string) (Entry, error)
	// GetLatest is Get as the replicated store's leader has it: for the
	// grant every request reads, so a revocation made on one node holds
	// on every other at once.
	GetLatest(ctx context.Context, t Table, key string) (Entry, error)
	// Create writes key if it does not exist (else ErrConflict). ttl > 0
	// ends the record sooner than its table's age.
	Create(ctx context.Context, t Table, key string, value []byte, ttl time.Duration) (uint64, error)
	// Update writes key if its revision is still rev (else ErrConflict).
	Update(ctx context.Context, t Table, key string, value []byte, rev uint64) (uint64, error)
	// Delete removes key; rev > 0 only if its revision is still rev (else
	// ErrConflict). Deleting a missing key is not an error.
	Delete(ctx context.Context, t Table, key string, rev uint64) error
	// Keys lists the keys of t that start with prefix.
	Keys(ctx context.Context, t Table, prefix string) ([]string, error)
}

// Entry is a stored value and its revision.
type Entry struct {
	Value    []byte
	Revision uint64
}

// Table is one of the server's record kinds; each has its own bound.
type Table uint8

// The tables (the rr_oauth_* buckets; docs/oauth.md has their bounds).
const (
	TableClients   Table = iota // c.<client id>
	TableFlow                   // r. u. z. l.: requests, user codes, codes, login links
	TableGrants                 // g.<grant id>
	TableTokens                 // a. f.: access and refresh token hashes
	TableApprovers              // a.<approver id>
	TableSessions               // s.<hash(session)>
	numTables
)

var tableNames = [numTables]string{"clients", "flow", "grants", "tokens", "approvers", "sessions"}

func (t Table) String() string {
	if t < numTables {
		return tableNames[t]
	}
	return fmt.Sprintf("table(%d)", uint8(t))
}

// The store's errors. An implementation wraps its own in these.
var (
	ErrNotFound = errors.New("oauth store: not found")
	// ErrConflict is a create of an existing key or a write at a stale
	// revision.
	ErrConflict = errors.New("oauth store: the record exists or changed meanwhile")
	// ErrFull is a table at its bound: the write was refused.
	ErrFull = errors.New("oauth store: the table is full")
)

func notFound(err error) bool   { return errors.Is(err, ErrNotFound) }
func isConflict(err error) bool { return errors.Is(err, ErrConflict) }
func isFull(err error) bool     { return errors.Is(err, ErrFull) }

// key is one record's address: its table and its key there. Every key is
// built in keys.go.
type key struct {
	t Table
	k string
}

func (k key) String() string { return k.t.String() + "/" + k.k }

// getRec reads k and decodes it into a T, with the revision for a later
// compare-and-set.
func getRec[T any](ctx context.Context, st Store, k key) (*T, uint64, error) {
	e, err := st.Get(ctx, k.t, k.k)
	return decodeRec[T](k, e, err)
}

// getLatestRec is getRec as the leader has the record (Store.GetLatest).
func getLatestRec[T any](ctx context.Context, st Store, k key) (*T, uint64, error) {
	e, err := st.GetLatest(ctx, k.t, k.k)
	return decodeRec[T](k, e, err)
}

func decodeRec[T any](k key, e Entry, err error) (*T, uint64, error) {
	if err != nil {
		return nil, 0, err
	}
	var v T
	if err := json.Unmarshal(e.Value, &v); err != nil {
		return nil, 0, fmt.Errorf("decode %s: %w", k, err)
	}
	return &v, e.Revision, nil
}

// createRec stores v at k if k is free; ttl > 0 shortens its life.
func createRec(ctx context.Context, st Store, k key, v any, ttl time.Duration) error {
	_, err := st.Create(ctx, k.t, k.k, mustJSON(v), ttl)
	return err
}

// putRec writes v at k if k's revision is still rev.
func putRec(ctx context.Context, st Store, k key, v any, rev uint64) error {
	_, err := st.Update(ctx, k.t, k.k, mustJSON(v), rev)
	return err
}

// del removes k (rev > 0: only at that revision).
func del(ctx context.Context, st Store, k key, rev uint64) error {
	return st.Delete(ctx, k.t, k.k, rev)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("oauth: marshal %T: %v", v, err)) // only our own plain structs
	}
	return b
}

// errContention is a compare-and-set loop that lost every round.
var errContention = errors.New("too much contention on one record")

var errSkip = errors.New("no change")

// update applies fn to k's record with compare-and-set, retrying on a
// concurrent write. fn returning errSkip leaves the record as it is.
func update[T any](ctx context.Context, st Store, k key, fn func(*T) error) (*T, error) {
	for range 16 {
		v, rev, err := getRec[T](ctx, st, k)
		if err != nil {
			return nil, err
		}
		if err := fn(v); err != nil {
			if errors.Is(err, errSkip) {
				return v, nil
			}
			return nil, err
		}
		if err := putRec(ctx, st, k, v, rev); err != nil {
			if isConflict(err) {
				continue
			}
			return nil, err
		}
		return v, nil
	}
	return nil, errContention
}

// listRecs reads every record of t under prefix (a bounded table).
func listRecs[T any](ctx context.Context, st Store, t Table, prefix string) ([]*T, error) {
	keys, err := st.Keys(ctx, t, prefix)
	if err != nil {
		return nil, unavailable("list", err)
	}
	var out []*T
	for _, k := range keys {
		v, _, err := getRec[T](ctx, st, key{t, k})
		if notFound(err) {
			continue
		}
		if err != nil {
			return nil, unavailable("list", err)
		}
		out = append(out, v)
	}
	return out, nil
}
