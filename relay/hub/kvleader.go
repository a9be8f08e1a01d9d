package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A replicated KV bucket answers Get with a direct get (the client's
// default for buckets), which any replica may serve, including one that
// has not applied the latest writes yet. "Found" is then at worst an older
// revision, which the compare-and-set writes catch; "not found" for a key
// written a moment ago on another node would refuse a device enrolled
// there (401 at connect, which an agent does not retry) or a pairing code
// made there. So a replicated bucket confirms "not found" with the stream
// leader (leaderGet) before believing it.

// jsMsgGetSubject is the JetStream API's leader-served message get.
const jsMsgGetSubject = jetstream.DefaultAPIPrefix + "STREAM.MSG.GET.KV_"

// leaderGet reads key's latest entry in bucket from the stream's leader.
func leaderGet(ctx context.Context, nc *nats.Conn, bucket, key string) (jetstream.KeyValueEntry, error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": "$KV." + bucket + "." + key})
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opTimeout)
		defer cancel()
	}
	msg, err := nc.RequestWithContext(ctx, jsMsgGetSubject+bucket, req)
	if err != nil {
		return nil, fmt.Errorf("leader get %s/%s: %w", bucket, key, err)
	}
	var resp struct {
		Error *struct {
			Code        int                 `json:"code"`
			ErrCode     jetstream.ErrorCode `json:"err_code"`
			Description string              `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq    uint64    `json:"seq"`
			Header []byte    `json:"hdrs"`
			Data   []byte    `json:"data"`
			Time   time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("leader get %s/%s: %w", bucket, key, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrKeyNotFound
	case resp.Error != nil:
		return nil, fmt.Errorf("leader get %s/%s: %s (%d)", bucket, key, resp.Error.Description, resp.Error.ErrCode)
	case resp.Message == nil:
		return nil, fmt.Errorf("leader get %s/%s: empty answer", bucket, key)
	}
	m := resp.Message
	if len(m.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(m.Header)
		if err != nil {
			return nil, fmt.Errorf("leader get %s/%s: %w", bucket, key, err)
		}
		if h.Get("KV-Operation") != "" { // a delete or purge marker
			return nil, jetstream.ErrKeyNotFound // as Get answers a deleted key
		}
	}
	return leaderEntry{bucket: bucket, key: key, value: m.Data, rev: m.Seq, created: m.Time}, nil
}

// leaderEntry is an entry leaderGet read.
type leaderEntry struct {
	bucket, key string
	value       []byte
	rev         uint64
	created     time.Time
}

func (e leaderEntry) Bucket() string                  { return e.bucket }
func (e leaderEntry) Key() string                     { return e.key }
func (e leaderEntry) Value() []byte                   { return e.value }
func (e leaderEntry) Revision() uint64                { return e.rev }
func (e leaderEntry) Created() time.Time              { return e.created }
func (e leaderEntry) Delta() uint64                   { return 0 }
func (e leaderEntry) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// latestKV reads a replicated bucket's keys from the stream leader first:
// where a stale "found" matters (a revoked flag not yet applied on the
// replica that answers), not only a stale "not found". It costs the same
// one request, served by the leader. When the leader cannot answer (an
// election), it falls back to the bucket's own Get: available first, and
// a write acknowledged before the election is on the new leader anyway.
type latestKV struct{ countingKV }

func (k latestKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := leaderGet(ctx, k.leader, k.bucket, key)
	if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
		k.count("get", err)
		return e, err
	}
	return k.countingKV.Get(ctx, key)
}

// latest is kv reading from its stream's leader when it is replicated.
func latest(kv jetstream.KeyValue) jetstream.KeyValue {
	if k, ok := kv.(countingKV); ok && k.leader != nil {
		return latestKV{k}
	}
	return kv
}
