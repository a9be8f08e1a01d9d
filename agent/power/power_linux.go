package power

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/godbus/dbus/v5"
)

const (
	logindName    = "org.freedesktop.login1"
	logindPath    = dbus.ObjectPath("/org/freedesktop/login1")
	managerIface  = "org.freedesktop.login1.Manager"
	prepareSignal = managerIface + ".PrepareForSleep"
)

// Watch calls cfg.OnSleep before each suspend and cfg.OnResume after each
// resume until ctx ends (then it returns nil), and cfg.OnReady once logind
// answered and the signal is subscribed. It returns an error wrapping
// ErrUnavailable when logind is not on the bus, or any other error when the
// bus cannot be used or goes away.
func Watch(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	log := cfg.Logger
	var conn *dbus.Conn
	var err error
	if cfg.BusAddress == "" {
		conn, err = dbus.ConnectSystemBus(dbus.WithContext(ctx))
	} else {
		conn, err = dbus.Connect(cfg.BusAddress, dbus.WithContext(ctx))
	}
	if err != nil {
		return fmt.Errorf("%w: connect to the system bus: %w", ErrUnavailable, err)
	}
	defer conn.Close()

	// The sender match makes the bus drop PrepareForSleep sent by anyone but
	// the owner of logind's name, so no other process can fake a suspend.
	if err := conn.AddMatchSignalContext(ctx,
		dbus.WithMatchSender(logindName), dbus.WithMatchObjectPath(logindPath),
		dbus.WithMatchInterface(managerIface), dbus.WithMatchMember("PrepareForSleep")); err != nil {
		return fmt.Errorf("power: subscribe to PrepareForSleep: %w", err)
	}
	sigs := make(chan *dbus.Signal, 8)
	conn.Signal(sigs)

	lock, err := inhibit(ctx, conn)
	if err != nil {
		var de dbus.Error
		if errors.As(err, &de) && (de.Name == "org.freedesktop.DBus.Error.ServiceUnknown" || de.Name == "org.freedesktop.DBus.Error.NameHasNoOwner") {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		// Without the lock the announcement may not make it before suspend;
		// still better than not announcing at all.
		log.Warn("power: no sleep inhibitor lock; the sleep announcement may be cut short", "err", err)
	}
	defer func() { release(lock) }()
	log.Debug("power: watching logind for sleep", "lock", lock != nil)
	cfg.OnReady()

	sleeping := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case s, ok := <-sigs:
			if !ok {
				if ctx.Err() != nil {
					return nil // the connection closes with ctx
				}
				return errors.New("power: the system bus connection closed")
			}
			if s.Path != logindPath || s.Name != prepareSignal || len(s.Body) != 1 {
				continue
			}
			start, ok := s.Body[0].(bool)
			if !ok {
				continue
			}
			if start {
				sleeping = true
				log.Info("power: the system is going to sleep")
				sctx, cancel := context.WithTimeout(ctx, cfg.SleepTimeout)
				cfg.OnSleep(sctx)
				cancel()
				// Releasing the lock is what lets logind suspend now.
				release(lock)
				lock = nil
				continue
			}
			if sleeping {
				log.Info("power: the system woke up")
			}
			sleeping = false
			cfg.OnResume(ctx)
			if lock == nil {
				if lock, err = inhibit(ctx, conn); err != nil {
					log.Warn("power: could not re-take the sleep inhibitor lock", "err", err)
				}
			}
		}
	}
}

// inhibit takes a delay lock on sleep: logind holds the suspend until the
// returned file is closed or InhibitDelayMaxSec passes.
func inhibit(ctx context.Context, conn *dbus.Conn) (*os.File, error) {
	var fd dbus.UnixFD
	err := conn.Object(logindName, logindPath).CallWithContext(ctx, managerIface+".Inhibit", 0,
		"sleep", "roomrelay", "announce sleep to the hub", "delay").Store(&fd)
	if err != nil {
		return nil, fmt.Errorf("logind Inhibit: %w", err)
	}
	return os.NewFile(uintptr(fd), "logind-inhibitor"), nil
}

func release(f *os.File) {
	if f != nil {
		f.Close()
	}
}
