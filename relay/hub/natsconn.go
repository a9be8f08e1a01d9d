package hub

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roomrelay/roomrelay/internal/dirlock"
)

// dataDirLock is held in the data dir while a hub runs on it, in every
// mode: two embedded NATS servers on one JetStream store corrupt it, and
// two hubs on one data dir with --nats share a node name (colliding
// liveness records and route acks).
const dataDirLock = "hub.lock"

// lockDataDir refuses a second hub on the same data dir, naming the first.
func (h *Hub) lockDataDir() (func(), error) {
	if err := os.MkdirAll(h.cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("hub: create data dir: %w", err)
	}
	f, err := dirlock.Acquire(h.cfg.DataDir, dataDirLock)
	var held *dirlock.LockedError
	if errors.As(err, &held) {
		return nil, fmt.Errorf("hub: data dir %s is in use by pid %s (a second hub on one data dir would share its node name and, with embedded NATS, corrupt its JetStream store): stop that hub or give this one another --data-dir", h.cfg.DataDir, held.PID)
	}
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	return func() { f.Close() }, nil
}

// natsOptions are the options of the connection to an external deployment:
// reconnect forever, and say in the log when it drops and where it went.
func (h *Hub) natsOptions() []nats.Option {
	log := h.log.With("component", "nats")
	opts := []nats.Option{
		nats.Name("roomrelay-hub " + h.cfg.NodeName),
		nats.Timeout(5 * time.Second),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // our own Close
			}
			log.Warn("NATS disconnected; reconnecting", "server", nc.ConnectedUrlRedacted(), "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("NATS reconnected", "server", nc.ConnectedUrlRedacted(), "server_name", nc.ConnectedServerName())
			h.natsBack.fire()
		}),
		nats.ClosedHandler(func(*nats.Conn) { log.Info("NATS connection closed") }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("NATS asynchronous error", "subject", subj, "err", err)
		}),
	}
	if h.cfg.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(h.cfg.NATSCreds))
	}
	if h.cfg.NATSTLSCA != "" {
		opts = append(opts, nats.RootCAs(h.cfg.NATSTLSCA))
	}
	return opts
}

// errPermanent marks a startup failure retrying cannot fix.
type errPermanent struct{ error }

func (e errPermanent) Unwrap() error { return e.error }

// untilReady runs step until it succeeds, ctx ends or the startup deadline
// passes, backing off from 250 ms to 2 s and logging each failure, so a hub
// started with (or before) its NATS cluster waits for it instead of
// exiting.
func (h *Hub) untilReady(ctx context.Context, deadline time.Time, what string, step func(context.Context) error) error {
	wait := 250 * time.Millisecond
	var cause error // the last failure that was not the step's own deadline
	for attempt := 1; ; attempt++ {
		// One attempt gets at most 5 s (JetStream answers in milliseconds
		// when it can), so a request sent while NATS was away is retried
		// soon after it is back.
		stepDeadline := time.Now().Add(5 * time.Second)
		if deadline.Before(stepDeadline) {
			stepDeadline = deadline
		}
		sctx, cancel := context.WithDeadline(ctx, stepDeadline)
		err := step(sctx)
		cancel()
		if err == nil {
			if attempt > 1 {
				h.log.Info(what+": done", "attempts", attempt)
			}
			return nil
		}
		var perm errPermanent
		if errors.As(err, &perm) {
			return perm.error
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			cause = err
		}
		left := time.Until(deadline)
		if left <= 0 {
			if errors.Is(err, context.DeadlineExceeded) && cause != nil {
				err = cause // the last attempt ran out of time: say why the others failed
			}
			return fmt.Errorf("%s: gave up after %s (--startup-timeout): %w", what, h.cfg.StartupTimeout, err)
		}
		d := min(wait+rand.N(wait/4+1), left)
		h.log.Warn(what+": not yet; retrying", "attempt", attempt, "retry_in", d.Round(time.Millisecond), "err", err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-t.C:
		}
		wait = min(wait*2, 2*time.Second)
	}
}

// connectExternal dials the external NATS deployment, retrying until the
// startup deadline.
func (h *Hub) connectExternal(ctx context.Context, deadline time.Time) (*nats.Conn, error) {
	var nc *nats.Conn
	err := h.untilReady(ctx, deadline, "connect to NATS at "+h.cfg.NATSURL, func(context.Context) error {
		c, err := nats.Connect(h.cfg.NATSURL, h.natsOptions()...)
		if err != nil {
			if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) {
				return errPermanent{fmt.Errorf("NATS refused the credentials: %w", err)}
			}
			return err
		}
		nc = c
		return nil
	})
	return nc, err
}

// setupStore creates or updates the buckets and the stream, retrying (a
// cluster without a JetStream leader yet answers with errors) until the
// startup deadline. A replica count the deployment can never place is
// reported at once.
func (h *Hub) setupStore(ctx context.Context, deadline time.Time) (*store, error) {
	var st *store
	err := h.untilReady(ctx, deadline, "set up JetStream", func(sctx context.Context) error {
		s, err := openStore(sctx, h.js, h.cfg.Replicas, h.cfg.StorageBudget, h.log)
		var re *errReplicas
		if errors.As(err, &re) && re.final {
			return errPermanent{err}
		}
		if err != nil {
			return err
		}
		st = s
		return nil
	})
	return st, err
}
