//go:build !windows

package replace

// A Unix rename never fails because a reader has the target open.
func transient(error) bool { return false }

func retry(string, string) error { panic("unreachable") }
