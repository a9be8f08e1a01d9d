package oauth

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub"
)

// Bounds on guessing device-approval codes. A code is 8 characters of a
// 27-letter alphabet (~38 bits) and lives minutes, but any enrolled device
// may ask about any code: unbounded, one device tried ~3,800 a second.
//
//   - Per device: a device gets guessMissesPerDevice wrong codes per
//     guessWindow; past that every lookup it makes is refused (429) until
//     the window ends, the right code included (it cannot be told apart
//     without looking it up).
//   - Per code: a wrong code whose first group (4 characters) is a real
//     code's is a wrong try against that code; after guessMissesPerCode of
//     them the code is dead (refused as unknown); the count lives until
//     codes have been silent for a code's lifetime, so every wrong try made
//     while a code lives counts against it.
//     A guesser, however many devices it has, then finds a given code with
//     at most guessMissesPerCode/27^4 (~1e-5) chance.
//
// Both are counted in memory per hub node (a cluster multiplies them by its
// node count) and bounded: at guessMaxGroups first groups the one first
// missed longest ago goes.

const (
	guessMissesPerDevice = 10
	guessWindow          = 5 * time.Minute
	guessMissesPerCode   = 5
	guessMaxGroups       = 50_000
	guessMaxDevices      = 50_000
)

// apiRateLimited is the hub API code of a device over its guessing bound.
const apiRateLimited = "rate_limited"

var errTooManyGuesses = &hub.Error{Status: http.StatusTooManyRequests, Code: apiRateLimited,
	Message: "this device gave " + strconv.Itoa(guessMissesPerDevice) + " unknown approval codes in " + guessWindow.String() +
		": wait a few minutes, then type the code shown in the browser"}

var errCodeGuessed = &hub.Error{Status: http.StatusNotFound, Code: apiNotFound,
	Message: "this approval code was refused after " + strconv.Itoa(guessMissesPerCode) +
		" wrong tries against it: start again in the browser for a new one"}

type guessGuard struct {
	now     func() time.Time
	codeTTL time.Duration

	mu      sync.Mutex
	devices map[string]*guessWin // device id → its misses in the current window
	groups  map[string]*guessWin // a code's first group → wrong tries against it
	order   []groupAt            // groups in the order first missed (FIFO eviction)
}

type guessWin struct {
	start, last time.Time
	n           int
}

type groupAt struct {
	group string
	start time.Time
}

func newGuessGuard(now func() time.Time, codeTTL time.Duration) *guessGuard {
	return &guessGuard{now: now, codeTTL: codeTTL, devices: map[string]*guessWin{}, groups: map[string]*guessWin{}}
}

// allow says whether device may look a code up now.
func (g *guessGuard) allow(device string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.devices[device]
	if w != nil && g.now().Sub(w.start) < guessWindow && w.n >= guessMissesPerDevice {
		return errTooManyGuesses
	}
	return nil
}

// dead says whether code (normalized) has had too many wrong tries.
func (g *guessGuard) dead(code string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.groups[code[:4]]
	return w != nil && g.now().Sub(w.last) < g.codeTTL && w.n >= guessMissesPerCode
}

// miss counts a wrong code from device; code is "" when it was not even
// code-shaped (then only the device's count moves).
func (g *guessGuard) miss(device, code string) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.devices[device]
	if w == nil || now.Sub(w.start) >= guessWindow {
		if w == nil && len(g.devices) >= guessMaxDevices {
			for k, v := range g.devices {
				if now.Sub(v.start) >= guessWindow {
					delete(g.devices, k)
				}
			}
			if len(g.devices) >= guessMaxDevices {
				return // every enrolled device guessing at once: the per-code bound still holds
			}
		}
		w = &guessWin{start: now}
		g.devices[device] = w
	}
	w.n++
	if code == "" {
		return
	}
	group := code[:4]
	gw := g.groups[group]
	if gw == nil || now.Sub(gw.last) >= g.codeTTL {
		for len(g.groups) >= guessMaxGroups && len(g.order) > 0 {
			old := g.order[0]
			g.order = g.order[1:]
			if cur := g.groups[old.group]; cur != nil && cur.start.Equal(old.start) {
				delete(g.groups, old.group)
			}
		}
		gw = &guessWin{start: now}
		g.groups[group] = gw
		g.order = append(g.order, groupAt{group, now})
	}
	gw.n++
	gw.last = now
}
