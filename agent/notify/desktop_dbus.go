//go:build linux || freebsd || netbsd || openbsd || dragonfly

package notify

import (
	"context"
	"errors"
	"fmt"
	"html"
	"slices"

	"github.com/godbus/dbus/v5"
)

// The freedesktop Desktop Notifications interface.
const (
	notifName  = "org.freedesktop.Notifications"
	notifPath  = dbus.ObjectPath("/org/freedesktop/Notifications")
	notifIface = "org.freedesktop.Notifications"
)

// Desktop is the platform's notifier: freedesktop Notifications on the
// session bus.
func Desktop(cfg Config) Notifier { return &dbusNotifier{addr: cfg.BusAddress} }

type dbusNotifier struct{ addr string }

// Notify connects for this one note: proposals are rare, and a connection
// per note survives a restarted session bus without reconnect logic.
func (d *dbusNotifier) Notify(ctx context.Context, n Note) error {
	var conn *dbus.Conn
	var err error
	if d.addr == "" {
		// Not SessionBus: that one auto-launches a bus with dbus-launch
		// when there is none, which would leave a stray daemon behind.
		conn, err = dbus.SessionBusPrivateNoAutoStartup(dbus.WithContext(ctx))
		if err == nil {
			if err = conn.Auth(nil); err == nil {
				err = conn.Hello()
			}
			if err != nil {
				conn.Close()
			}
		}
	} else {
		conn, err = dbus.Connect(d.addr, dbus.WithContext(ctx))
	}
	if err != nil {
		return fmt.Errorf("%w: connect to the session bus: %w", ErrUnavailable, err)
	}
	defer conn.Close()
	obj := conn.Object(notifName, notifPath)

	summary, body := n.Text()
	// A server that renders body markup would turn a "<a href>" in a room
	// name into a link; escaping it where markup is off would show "&lt;".
	var caps []string
	if err := obj.CallWithContext(ctx, notifIface+".GetCapabilities", 0).Store(&caps); err != nil {
		return callErr(ctx, "GetCapabilities", err)
	}
	if slices.Contains(caps, "body-markup") {
		body = html.EscapeString(body)
	}
	hints := map[string]dbus.Variant{"urgency": dbus.MakeVariant(byte(1))} // normal
	var id uint32
	err = obj.CallWithContext(ctx, notifIface+".Notify", 0,
		AppName, uint32(0), "", summary, body, []string{}, hints, int32(-1)).Store(&id)
	if err != nil {
		return callErr(ctx, "Notify", err)
	}
	return nil
}

func callErr(ctx context.Context, method string, err error) error {
	// At the deadline the connection closes too (WithContext), so the call
	// may fail with "use of closed network connection" rather than with
	// the context's error: the context says what happened.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: %w", ErrTimeout, method, err)
	}
	var de dbus.Error
	if errors.As(err, &de) && (de.Name == "org.freedesktop.DBus.Error.ServiceUnknown" || de.Name == "org.freedesktop.DBus.Error.NameHasNoOwner") {
		return fmt.Errorf("%w: no notification daemon on the session bus (%s): %w", ErrUnavailable, method, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrFailed, method, err)
}
