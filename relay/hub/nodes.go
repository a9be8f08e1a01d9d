package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Node liveness: every node rewrites its record in rr_nodes each NodeBeat
// and every node watches the bucket, so a crashed node is known dead after
// nodeDeadBeats missed beats — seconds, where a device's presence record
// goes stale only after its refresh interval (10 minutes). Its devices then
// read offline, and commands in flight to it fail at once.

// nodeDeadBeats is how many beats a node may miss before it is dead.
const nodeDeadBeats = 4

type nodeRec struct {
	Node      string    `json:"node"`
	Started   time.Time `json:"started"`
	Refreshed time.Time `json:"refreshed"`
	BeatMS    int64     `json:"beat_ms"`
}

// nodeTable is this node's view of the others, fed by the watch. Times are
// this machine's clock when an update arrived, so clock skew between nodes
// does not matter.
type nodeTable struct {
	mu   sync.Mutex
	m    map[string]nodeSeen
	self string // this node's key: if its own beats stop arriving, the watch is what failed
}

type nodeSeen struct {
	heard   time.Time     // when its last beat arrived here
	beat    time.Duration // its beat interval
	gone    bool          // it deleted its record: shut down cleanly
	started time.Time     // the run that beats: its record's Started (the node's clock)
}

// nodeKey is a node name as a KV key: what a key cannot hold becomes "_".
func nodeKey(name string) string { return kvUnsafeRe.ReplaceAllString(name, "_") }

var kvUnsafeRe = regexp.MustCompile(`[^A-Za-z0-9_=-]`)

// dead reports whether node is known dead, and since when. A node never
// heard of is not known dead: it may predate liveness records, and the
// staleness bound its presence records carry still judges its devices.
func (t *nodeTable) dead(node string, now time.Time) (bool, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.m[nodeKey(node)]
	switch {
	case !ok:
		return false, time.Time{}
	case n.gone:
		return true, n.heard
	case !t.hearsSelfLocked(now):
		// Our watch (or our NATS connection) is behind: every node would
		// look dead. No opinion until it is back.
		return false, time.Time{}
	}
	return now.Sub(n.heard) > nodeDeadBeats*n.beat, n.heard
}

// otherRun reports whether a presence record written by node's run that
// started at started belongs to an earlier run than the one beating now:
// that run crashed (a clean stop writes offline), and the record's devices
// are not connected through it. Equality, not order, so the nodes' clocks
// do not matter; false when either side does not say.
func (t *nodeTable) otherRun(node string, started time.Time) bool {
	if started.IsZero() {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.m[nodeKey(node)]
	return ok && !n.gone && !n.started.IsZero() && !n.started.Equal(started)
}

func (t *nodeTable) hearsSelfLocked(now time.Time) bool {
	me, ok := t.m[t.self]
	return ok && !me.gone && now.Sub(me.heard) <= nodeDeadBeats*me.beat
}

func (t *nodeTable) hearsSelf(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.hearsSelfLocked(now)
}

func (t *nodeTable) set(key string, n nodeSeen) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]nodeSeen{}
	}
	t.m[key] = n
}

// beatNodes writes this node's record now and every beat until ctx ends,
// then deletes it (a clean stop: the node is gone, not dead).
func (h *Hub) beatNodes(ctx context.Context) {
	rec := nodeRec{Node: h.cfg.NodeName, Started: h.incarnation, BeatMS: h.cfg.NodeBeat.Milliseconds()}
	key := nodeKey(h.cfg.NodeName)
	put := func() {
		rec.Refreshed = time.Now().UTC()
		pctx, cancel := context.WithTimeout(ctx, h.cfg.NodeBeat)
		defer cancel()
		if _, err := h.st.nodes.Put(pctx, key, mustJSON(rec)); err != nil && ctx.Err() == nil {
			h.log.Warn("node liveness beat failed", "err", err)
		}
	}
	put()
	t := time.NewTicker(h.cfg.NodeBeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := h.st.nodes.Delete(dctx, key); err != nil {
				h.log.Warn("remove node liveness record", "err", err)
			}
			cancel()
			return
		case <-t.C:
			put()
		}
	}
}

// watchNodes keeps h.nodes current until ctx ends. A watch that stops
// delivering (its consumer was on a NATS server that died) is noticed by
// this node's own beats going missing, and replaced.
func (h *Hub) watchNodes(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		h.followNodes(ctx, w)
		if ctx.Err() != nil {
			return
		}
		h.log.Warn("node liveness watch stalled; watching again")
		for {
			var err error
			if w, err = h.st.nodes.WatchAll(ctx); err == nil {
				break
			}
			h.log.Warn("watch node liveness", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(h.cfg.NodeBeat):
			}
		}
	}
}

// followNodes applies one watch's updates until ctx ends or it stalls.
func (h *Hub) followNodes(ctx context.Context, w jetstream.KeyWatcher) {
	defer w.Stop()
	initial := true
	check := time.NewTicker(h.cfg.NodeBeat)
	defer check.Stop()
	started := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-check.C:
			// Give a new watch the dead time to hear us first.
			if time.Since(started) > nodeDeadBeats*h.cfg.NodeBeat && !h.nodes.hearsSelf(time.Now()) {
				return
			}
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				initial = false // the end of the stored values
				continue
			}
			now := time.Now()
			if e.Operation() != jetstream.KeyValuePut {
				h.nodes.set(e.Key(), nodeSeen{heard: now, gone: true})
				continue
			}
			var rec nodeRec
			if json.Unmarshal(e.Value(), &rec) != nil || rec.BeatMS <= 0 {
				continue
			}
			heard := now
			if initial && e.Created().Before(now) {
				// A stored beat: as old as the server says, so a node
				// that died before we started is not taken for alive.
				heard = e.Created()
			}
			h.nodes.set(e.Key(), nodeSeen{heard: heard, beat: time.Duration(rec.BeatMS) * time.Millisecond, started: rec.Started})
		}
	}
}

// claimNodeName refuses to start under a node name another live node
// holds: two nodes beating one record look like one node to the others,
// and each takes the other's route acks. A record refreshed within the
// dead time may also be this node's own from before a crash, so a fresh
// one is watched for one and a half of its beats: a refresh means its
// owner lives. A clean stop deletes the record, so only a restart after a
// crash waits.
func (h *Hub) claimNodeName(ctx context.Context) error {
	if h.cfg.NATSURL == "" {
		// Embedded NATS is this process's alone (it does not listen) on a
		// data dir this process holds locked: a record of its name is its
		// own predecessor's, dead. Waiting it out cost every restart after
		// a crash a beat and a half before the hub was ready.
		return nil
	}
	key := nodeKey(h.cfg.NodeName)
	e, err := h.st.nodes.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		h.log.Warn("read this node's liveness record", "err", err)
		return nil // the beats will show the collision in the others' view
	}
	var rec nodeRec
	if json.Unmarshal(e.Value(), &rec) != nil || rec.BeatMS <= 0 {
		return nil
	}
	beat := time.Duration(rec.BeatMS) * time.Millisecond
	if time.Since(rec.Refreshed) > nodeDeadBeats*beat {
		return nil
	}
	w, err := h.st.nodes.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("watch node liveness record %s: %w", key, err)
	}
	defer w.Stop()
	t := time.NewTimer(beat * 3 / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case u, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if u != nil && u.Operation() == jetstream.KeyValuePut {
				return fmt.Errorf("node name %q is held by a live node (started %s, beating every %s; node names must be unique): give this node another --node-name", h.cfg.NodeName, rec.Started.Format(time.RFC3339), beat)
			}
		}
	}
}
