package oauth

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemStore is the Store in one process's memory, with the same rules as
// the JetStream buckets: revisions, compare-and-set, a record's age
// restarted by each write, a per-record TTL, and a byte bound per table
// past which writes are refused (ErrFull). The tests of the server's
// logic run on it without NATS.
type MemStore struct {
	now func() time.Time

	mu     sync.Mutex
	rev    uint64
	tables [numTables]memTable
}

type memTable struct {
	maxAge   time.Duration // 0: kept until deleted
	maxBytes int64
	bytes    int64
	m        map[string]*memEntry
}

type memEntry struct {
	value   []byte
	rev     uint64
	expires time.Time // zero: never
}

// The tables' ages and default sizes, as the hub's buckets have them
// (relay/hub/buckets.go: the default 512 MiB budget's shares).
var tableAge = [numTables]time.Duration{
	TableClients: 90 * 24 * time.Hour, TableFlow: 30 * time.Minute, TableGrants: 90 * 24 * time.Hour,
	TableTokens: 90 * 24 * time.Hour, TableSessions: 7 * 24 * time.Hour,
}

var tableBytes = [numTables]int64{
	TableClients: 16 << 20, TableFlow: 16 << 20, TableGrants: 16 << 20,
	TableTokens: 48 << 20, TableApprovers: 4 << 20, TableSessions: 4 << 20,
}

// NewMemStore returns an empty store reading time from now (nil:
// time.Now) with the default bounds.
func NewMemStore(now func() time.Time) *MemStore {
	if now == nil {
		now = time.Now
	}
	s := &MemStore{now: now}
	for t := range numTables {
		s.tables[t] = memTable{maxAge: tableAge[t], maxBytes: tableBytes[t], m: map[string]*memEntry{}}
	}
	return s
}

// SetMaxBytes sets table t's bound (tests fill a small table).
func (s *MemStore) SetMaxBytes(t Table, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tables[t].maxBytes = n
}

// Bytes is what table t holds now.
func (s *MemStore) Bytes(t Table) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(t)
	return s.tables[t].bytes
}

func (s *MemStore) table(t Table) (*memTable, error) {
	if t >= numTables {
		return nil, fmt.Errorf("oauth store: no %s", t)
	}
	return &s.tables[t], nil
}

// liveLocked returns key's entry unless it expired (then it is dropped).
func (s *MemStore) liveLocked(tb *memTable, key string) *memEntry {
	e := tb.m[key]
	if e != nil && !e.expires.IsZero() && !s.now().Before(e.expires) {
		tb.bytes -= size(key, e.value)
		delete(tb.m, key)
		return nil
	}
	return e
}

func (s *MemStore) sweepLocked(t Table) {
	tb := &s.tables[t]
	for k := range tb.m {
		s.liveLocked(tb, k)
	}
}

func size(key string, v []byte) int64 { return int64(len(key) + len(v) + 64) } // ~ a message's overhead

func (s *MemStore) Get(_ context.Context, t Table, key string) (Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tb, err := s.table(t)
	if err != nil {
		return Entry{}, err
	}
	e := s.liveLocked(tb, key)
	if e == nil {
		return Entry{}, fmt.Errorf("%s/%s: %w", t, key, ErrNotFound)
	}
	return Entry{Value: slices.Clone(e.value), Revision: e.rev}, nil
}

func (s *MemStore) GetLatest(ctx context.Context, t Table, key string) (Entry, error) {
	return s.Get(ctx, t, key)
}

// putLocked writes key, checking the table's bound first (a full table
// is swept of expired records before it refuses).
func (s *MemStore) putLocked(t Table, tb *memTable, key string, value []byte, ttl time.Duration, old *memEntry) uint64 {
	s.rev++
	e := &memEntry{value: slices.Clone(value), rev: s.rev}
	age := tb.maxAge
	if ttl > 0 && (age == 0 || ttl < age) {
		age = ttl
	}
	if age > 0 {
		e.expires = s.now().Add(age)
	}
	if old != nil {
		tb.bytes -= size(key, old.value)
	}
	tb.bytes += size(key, value)
	tb.m[key] = e
	return e.rev
}

func (s *MemStore) roomLocked(t Table, tb *memTable, key string, value []byte, old *memEntry) error {
	need := size(key, value)
	if old != nil {
		need -= size(key, old.value)
	}
	if tb.bytes+need <= tb.maxBytes {
		return nil
	}
	s.sweepLocked(t)
	if tb.bytes+need <= tb.maxBytes {
		return nil
	}
	return fmt.Errorf("%s: %w (%d of %d bytes)", t, ErrFull, tb.bytes, tb.maxBytes)
}

func (s *MemStore) Create(_ context.Context, t Table, key string, value []byte, ttl time.Duration) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tb, err := s.table(t)
	if err != nil {
		return 0, err
	}
	if s.liveLocked(tb, key) != nil {
		return 0, fmt.Errorf("%s/%s: %w", t, key, ErrConflict)
	}
	if err := s.roomLocked(t, tb, key, value, nil); err != nil {
		return 0, err
	}
	return s.putLocked(t, tb, key, value, ttl, nil), nil
}

func (s *MemStore) Update(_ context.Context, t Table, key string, value []byte, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tb, err := s.table(t)
	if err != nil {
		return 0, err
	}
	old := s.liveLocked(tb, key)
	if old == nil || old.rev != rev {
		return 0, fmt.Errorf("%s/%s: %w", t, key, ErrConflict)
	}
	if err := s.roomLocked(t, tb, key, value, old); err != nil {
		return 0, err
	}
	return s.putLocked(t, tb, key, value, 0, old), nil
}

func (s *MemStore) Delete(_ context.Context, t Table, key string, rev uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tb, err := s.table(t)
	if err != nil {
		return err
	}
	e := s.liveLocked(tb, key)
	if e == nil {
		if rev > 0 {
			return fmt.Errorf("%s/%s: %w", t, key, ErrConflict)
		}
		return nil
	}
	if rev > 0 && e.rev != rev {
		return fmt.Errorf("%s/%s: %w", t, key, ErrConflict)
	}
	tb.bytes -= size(key, e.value)
	delete(tb.m, key)
	return nil
}

func (s *MemStore) Keys(_ context.Context, t Table, prefix string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tb, err := s.table(t)
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range tb.m {
		if strings.HasPrefix(k, prefix) && s.liveLocked(tb, k) != nil {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}
