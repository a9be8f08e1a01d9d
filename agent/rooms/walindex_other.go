//go:build !unix

package rooms

import "errors"

// walIndex is mapped on Unix only (walindex_unix.go); elsewhere the room
// summary cache stays off and every read_room asks SQLite.
type walIndex struct{}

func openWALIndex(string) (*walIndex, error) {
	return nil, errors.New("rooms: the wal-index is read on Unix only")
}

func (w *walIndex) header() walHeader { return walHeader{} }
func (w *walIndex) mapped() bool      { return false }
func (w *walIndex) close()            {}
