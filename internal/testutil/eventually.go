package testutil

import (
	"testing"
	"time"
)

// EventuallyLimit bounds Eventually. It only ends a test that is failing
// anyway; a passing condition returns as soon as it holds.
const EventuallyLimit = 30 * time.Second

// Eventually polls cond every 10 ms until it holds, and fails the test
// naming what it waited for if it does not within EventuallyLimit. Call it
// from the test's goroutine only (it may call t.Fatalf).
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(EventuallyLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", EventuallyLimit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
