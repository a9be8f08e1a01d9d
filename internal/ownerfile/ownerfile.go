// Package ownerfile makes a file readable by its owner only and checks that
// it still is, the way each OS means it: Unix mode 0600; on Windows a
// protected DACL (nothing inherited) granting the current user, SYSTEM and
// the Administrators group, since Windows' mode bits mean nothing (os.Stat
// says 0666 for every writable file) and the file would otherwise inherit
// its folder's entries (Users may read anything under C:\).
package ownerfile

import "fmt"

// SharedError says a file others can read was refused.
type SharedError struct {
	Path string
	Who  string // "mode 0644", or the Windows account or SID that may read it
}

func (e *SharedError) Error() string {
	return fmt.Sprintf("%s can be read by others (%s)", e.Path, e.Who)
}

// Describe says how files are protected on this OS, for messages.
func Describe() string { return describe }
