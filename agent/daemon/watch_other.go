//go:build !linux

package daemon

import "errors"

// changeWatcher is Linux-only; elsewhere the housekeeping loop polls.
type changeWatcher struct{}

func newChangeWatcher(...string) (*changeWatcher, error) {
	return nil, errors.New("no file change notification on this OS")
}

func (*changeWatcher) C() <-chan struct{} { return nil }
func (*changeWatcher) run()               {}
func (*changeWatcher) Close() error       { return nil }
