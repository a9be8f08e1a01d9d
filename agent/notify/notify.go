// Package notify tells the person at the device that something waits for
// them: a proposal for one of their local Rooms that only they can approve.
//
// A Notifier shows one Note on the desktop: freedesktop Notifications over
// the session D-Bus on Linux (and the BSDs), `osascript` on macOS, a toast
// through PowerShell on Windows. Queue sends notes from a goroutine its
// Run owns, so a slow or missing notification service never holds up the
// command that caused the note, and logs each kind of failure once.
//
// Room and app names come from the network; Note.Text cleans them (no
// control, bidi or other invisible characters, bounded length) before they
// reach any notification.
package notify

import (
	"context"
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ReviewCommand is how the owner reviews what a note announces.
const ReviewCommand = "roomrelay review --web"

// AppName is the application name notifications carry.
const AppName = "roomrelay"

// Errors a Notifier wraps, so Queue can tell causes apart.
var (
	// ErrUnsupported: this OS has no notifier here.
	ErrUnsupported = errors.New("notify: desktop notifications are not supported on this OS")
	// ErrUnavailable: the notification service (session bus, notification
	// daemon, osascript, PowerShell) is not reachable from this process,
	// e.g. an agent started outside a desktop session.
	ErrUnavailable = errors.New("notify: no desktop notification service reachable")
	// ErrFailed: the service was reached and refused or failed the call.
	ErrFailed = errors.New("notify: the notification service failed")
	// ErrTimeout: the service did not answer within the queue's timeout.
	ErrTimeout = errors.New("notify: the notification service did not answer in time")
)

// Note is one "a proposal waits" notification.
type Note struct {
	ProposalID string
	Project    string
	Room       string // the room's name as the owner knows it (or its id)
	App        string // the proposed app's name
	From       string // who proposed it, as the hub named the caller; may be empty
}

// Config configures Desktop.
type Config struct {
	// BusAddress is the D-Bus address of the session bus (Linux, BSDs);
	// empty means the session bus of the environment the agent runs in,
	// never one started for it. Tests point it at a private bus.
	BusAddress string
}

// Notifier shows a Note to the desktop user.
type Notifier interface {
	Notify(ctx context.Context, n Note) error
}

// Func adapts a function to Notifier.
type Func func(ctx context.Context, n Note) error

// Notify calls f.
func (f Func) Notify(ctx context.Context, n Note) error { return f(ctx, n) }

// Bounds for text from the network, in runes: a notification shows a line
// or two, and a long name only pushes the review hint out of sight.
const (
	maxName = 60
	maxFrom = 80
)

// Text is the note's summary (title line) and body, plain text, every
// network-supplied part cleaned.
func (n Note) Text() (summary, body string) {
	app, room := Clean(n.App, maxName), Clean(n.Room, maxName)
	if app == "" {
		app = "(unnamed)"
	}
	if room == "" {
		room = "(unnamed)"
	}
	summary = "Proposal waiting: “" + app + "” for room “" + room + "”"
	var b strings.Builder
	b.WriteString("A new app “" + app + "” was proposed for your room “" + room + "”")
	if from := Clean(n.From, maxFrom); from != "" {
		b.WriteString(" by " + from)
	}
	b.WriteString(". Nothing runs until you approve it. Review: " + ReviewCommand)
	return summary, b.String()
}

// Clean makes s safe to show: valid UTF-8; control characters (line
// breaks and tabs become a space), bidi controls and other invisible
// format characters removed; spaces collapsed; at most max runes, cut with
// "…".
func Clean(s string, max int) string {
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t' || r == '\v' || r == '\f' || r == 0x85 || r == 0x2028 || r == 0x2029:
			return ' '
		case unicode.IsControl(r), unicode.Is(unicode.Bidi_Control, r), unicode.Is(unicode.Cf, r),
			r == utf8.RuneError:
			return -1
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if max > 0 && utf8.RuneCountInString(s) > max {
		s = strings.TrimSpace(string([]rune(s)[:max-1])) + "…"
	}
	return s
}
