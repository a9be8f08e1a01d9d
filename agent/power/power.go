// Package power tells the agent when the machine is about to sleep and when
// it woke up, so it can announce `sleeping` to the hub before the network
// goes away and reconnect at once afterwards.
//
// On Linux it listens to systemd-logind's PrepareForSleep signal on the
// system D-Bus and holds a "delay" inhibitor lock, so logind waits (up to its
// InhibitDelayMaxSec, 5 s by default) until the announcement is out. On
// Windows it registers for the suspend and resume notifications
// (PowerRegisterSuspendResumeNotification). Other systems (macOS without
// cgo) return ErrUnsupported; there the agent's wall-clock jump detector
// notices the wake instead.
//
// Once the notifications are in place Watch calls OnReady: from then on the
// agent needs no wall-clock tick of its own (its largest source of idle
// wakeups), until Watch returns.
package power

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

var (
	// ErrUnsupported is returned by Watch where no sleep notification exists.
	ErrUnsupported = errors.New("power: sleep notifications are not supported on this OS")
	// ErrUnavailable means the sleep notifier (logind) is not reachable,
	// e.g. in a container or on a system without systemd.
	ErrUnavailable = errors.New("power: logind is not reachable on the system bus")
)

// DefaultSleepTimeout bounds OnSleep. It stays under logind's default
// InhibitDelayMaxSec (5 s): past that logind suspends anyway.
const DefaultSleepTimeout = 4 * time.Second

// Config configures Watch.
type Config struct {
	// BusAddress is the D-Bus address logind is on; empty means the system
	// bus. Tests point it at a private bus.
	BusAddress string
	// OnSleep runs before suspend while the delay lock is held; its context
	// ends after SleepTimeout. The agent wires it to AnnounceSleep.
	OnSleep func(ctx context.Context)
	// OnResume runs after the machine woke up (the agent's Resume).
	OnResume func(ctx context.Context)
	// OnReady runs once, when sleep and wake will be reported (the
	// subscription is in place). The agent wires it to SetOSWakeNotices.
	OnReady func()
	// SleepTimeout bounds OnSleep (default DefaultSleepTimeout).
	SleepTimeout time.Duration
	Logger       *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.OnSleep == nil {
		c.OnSleep = func(context.Context) {}
	}
	if c.OnResume == nil {
		c.OnResume = func(context.Context) {}
	}
	if c.OnReady == nil {
		c.OnReady = func() {}
	}
	if c.SleepTimeout <= 0 {
		c.SleepTimeout = DefaultSleepTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
