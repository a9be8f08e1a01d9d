//go:build !linux && !freebsd && !netbsd && !openbsd && !dragonfly && !darwin && !windows

package notify

import "context"

// Desktop is the platform's notifier; this OS has none.
func Desktop(cfg Config) Notifier { return unsupported{} }

type unsupported struct{}

func (unsupported) Notify(context.Context, Note) error { return ErrUnsupported }
