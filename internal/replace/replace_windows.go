package replace

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/windows"
)

// retryFor bounds the retries: a reader holds the file for the time of one
// read, so a rename still refused after this is not a transient refusal.
const retryFor = 2 * time.Second

func transient(err error) bool {
	return errors.Is(err, windows.ERROR_ACCESS_DENIED) || errors.Is(err, windows.ERROR_SHARING_VIOLATION)
}

func retry(oldpath, newpath string) error {
	deadline := time.Now().Add(retryFor)
	delay := time.Millisecond
	for {
		time.Sleep(delay)
		err := os.Rename(oldpath, newpath)
		if err == nil || !transient(err) || time.Now().After(deadline) {
			return err
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}
