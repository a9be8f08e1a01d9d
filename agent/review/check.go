package review

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/sandbox"
)

// Checker checks a pending proposal's files before the owner decides:
// rules, build and a smoke-run in the isolated sandbox. It only reads the
// files; nothing it does makes the proposal an app. Summary is one line for
// the owner ("builds, renders 12 elements, …" or the error at file:line);
// err means the check could not run, and says why.
type Checker interface {
	Check(ctx context.Context, files map[string]string) (summary string, ok bool, err error)
}

// Option configures a Handler.
type Option func(*Handler)

// WithChecker makes the proposal page show the result of c, run when the
// page is requested and bounded by timeout (default DefaultCheckTimeout).
func WithChecker(c Checker, timeout time.Duration) Option {
	return func(h *Handler) {
		h.checker = c
		if timeout > 0 {
			h.checkTimeout = timeout
		}
	}
}

// WithSessionStarted calls f once the URL's token was exchanged for the
// session, e.g. to remove a launch file that held the token.
func WithSessionStarted(f func()) Option {
	return func(h *Handler) { h.onSession = f }
}

// DefaultCheckTimeout bounds one check: a worker start, the React runtime
// load and the smoke-run's own limit, with room to spare.
const DefaultCheckTimeout = 20 * time.Second

// checkView is what the page shows of a check.
type checkView struct {
	State   string // "ok", "failed" or "none" (not checked: Summary says why)
	Summary string
}

// maxCachedChecks bounds the cache: a review session sees a few proposals.
const maxCachedChecks = 64

// checkCache keeps each content hash's result for the page's life, so a
// reload does not run the snippet again. Only completed checks are kept: a
// check that could not run (runtime missing, timeout) runs again next time.
type checkCache struct {
	mu sync.Mutex
	m  map[string]checkView
}

func (h *Handler) check(ctx context.Context, hash string, files map[string]string) checkView {
	if h.checker == nil {
		return checkView{State: "none", Summary: "this review page was started without the sandbox"}
	}
	h.checks.mu.Lock()
	v, ok := h.checks.m[hash]
	h.checks.mu.Unlock()
	if ok {
		return v
	}
	ctx, cancel := context.WithTimeout(ctx, h.checkTimeout)
	defer cancel()
	summary, passed, err := h.checker.Check(ctx, files)
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return checkView{State: "none", Summary: fmt.Sprintf("the sandbox check did not finish within %s", h.checkTimeout)}
	case err != nil:
		h.log.Warn("review: sandbox check", "err", err)
		return checkView{State: "none", Summary: err.Error()}
	}
	v = checkView{State: "failed", Summary: summary}
	if passed {
		v.State = "ok"
	}
	h.checks.mu.Lock()
	if h.checks.m == nil || len(h.checks.m) >= maxCachedChecks {
		h.checks.m = map[string]checkView{}
	}
	h.checks.m[hash] = v
	h.checks.mu.Unlock()
	return v
}

// ErrRuntimeMissing: the sandbox has no React runtime and the page does
// not fetch one.
var ErrRuntimeMissing = errors.New("React runtime missing; run `roomrelay snippet fetch-runtime`")

// Smoker is what SandboxChecker needs of a *sandbox.Pool.
type Smoker interface {
	SmokeRun(ctx context.Context, files map[string]string) (*sandbox.Result, error)
}

// SandboxChecker checks with the relay's proposal rules, then a smoke-run
// in pool's worker processes (build with esbuild, render, effects, timers,
// every onClick once), as `roomrelay snippet check` does.
func SandboxChecker(pool Smoker) Checker { return sandboxChecker{pool} }

type sandboxChecker struct{ pool Smoker }

func (c sandboxChecker) Check(ctx context.Context, files map[string]string) (string, bool, error) {
	if err := relay.ValidateSnippet(files); err != nil {
		return "breaks the proposal rules: " + err.Error(), false, nil
	}
	res, err := c.pool.SmokeRun(ctx, files)
	if err != nil {
		return "", false, fmt.Errorf("sandbox: %w", err)
	}
	if res.Phase == sandbox.PhaseRuntimeUnavailable {
		return "", false, ErrRuntimeMissing
	}
	return CheckSummary(res), res.OK, nil
}

// CheckSummary is one line for the owner about a smoke-run's result.
func CheckSummary(r *sandbox.Result) string {
	if r.OK {
		var b strings.Builder
		b.WriteString("passes the proposal rules, builds")
		if s := r.Render; s != nil {
			fmt.Fprintf(&b, ", renders %d %s", s.ElementCount, plural(s.ElementCount, "element", "elements"))
			if n := s.Elements["button"]; n > 0 {
				fmt.Fprintf(&b, " (%d %s)", n, plural(n, "button", "buttons"))
			}
		}
		fmt.Fprintf(&b, ", %d %s clicked without error", r.Clicks, plural(r.Clicks, "onClick handler", "onClick handlers"))
		if n := len(r.Console) + r.ConsoleDropped; n > 0 {
			fmt.Fprintf(&b, "; %d console %s", n, plural(n, "line", "lines"))
		}
		return b.String()
	}
	var b strings.Builder
	if r.Phase == sandbox.PhaseBuild {
		b.WriteString("does not build")
		if msgs := r.BuildErrors; len(msgs) > 0 {
			kind := "error"
			if f := msgs[0].File; f != "" {
				kind = strings.ToUpper(strings.TrimPrefix(fileExt(f), ".")) + " error"
			}
			fmt.Fprintf(&b, ": %s at %s", kind, msgs[0].String())
			if len(msgs) > 1 {
				fmt.Fprintf(&b, " (and %d more)", len(msgs)-1)
			}
			return b.String()
		}
	} else {
		fmt.Fprintf(&b, "fails in the smoke-run %s", phaseText(r.Phase))
	}
	if e := r.Error; e != nil {
		if loc := e.Location(); loc != "" {
			fmt.Fprintf(&b, " at %s", loc)
		}
		fmt.Fprintf(&b, ": %s", e.Message)
		if e.Note != "" {
			fmt.Fprintf(&b, " (%s)", e.Note)
		}
	}
	return b.String()
}

func phaseText(p sandbox.Phase) string {
	switch p {
	case sandbox.PhaseLoad:
		return "while loading the bundle"
	case sandbox.PhaseRender:
		return "while rendering"
	case sandbox.PhaseEffects:
		return "while running effects and timers"
	case sandbox.PhaseEvents:
		return "while clicking its onClick handlers"
	case sandbox.PhaseTimeout:
		return "past its time limit"
	case sandbox.PhaseMemory:
		return "past its memory limit"
	case sandbox.PhaseCrash:
		return "(the sandbox worker died)"
	}
	return "in phase " + string(p)
}

func fileExt(p string) string {
	if i := strings.LastIndexByte(p, '.'); i >= 0 && !strings.Contains(p[i:], "/") {
		return p[i:]
	}
	return ""
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
