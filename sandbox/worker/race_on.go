//go:build race

package worker

// raceEnabled: the race detector's runtime maps shadow memory that
// RLIMIT_DATA counts, so a race-instrumented worker cannot start under the
// cap. Such builds are for tests only.
const raceEnabled = true
