//go:build darwin

package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Desktop is the platform's notifier: Notification Center through
// osascript. cfg is not used on macOS.
func Desktop(cfg Config) Notifier { return osascript{} }

type osascript struct{}

// script reads the text from its arguments, so no network text is ever
// part of AppleScript source: nothing to quote.
var script = []string{
	"-e", "on run argv",
	"-e", `display notification (item 2 of argv) with title "` + AppName + `" subtitle (item 1 of argv)`,
	"-e", "end run",
}

func (osascript) Notify(ctx context.Context, n Note) error {
	bin, err := exec.LookPath("osascript")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	summary, body := n.Text()
	// Run directly, never through a shell; "--" ends osascript's options.
	cmd := exec.CommandContext(ctx, bin, append(append([]string{}, script...), "--", summary, body)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%w: osascript: %w", ErrTimeout, err)
		}
		return fmt.Errorf("%w: osascript: %w: %s", ErrFailed, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
