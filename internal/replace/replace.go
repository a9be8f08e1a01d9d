// Package replace puts a new version of a file in place atomically: write a
// temporary file beside it, then Rename. On Windows a rename over a file that
// another process has open for reading (`roomrelay status` reading the
// agent's status file, the agent reading the policy the CLI rewrites) fails
// with "Access denied" or a sharing violation for as long as that reader
// holds it, which is a moment; Rename retries then instead of losing the
// write.
package replace

import "os"

// Rename renames oldpath to newpath, replacing newpath.
func Rename(oldpath, newpath string) error {
	err := os.Rename(oldpath, newpath)
	if err == nil || !transient(err) {
		return err
	}
	return retry(oldpath, newpath)
}
