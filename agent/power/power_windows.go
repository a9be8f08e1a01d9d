package power

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// PowerRegisterSuspendResumeNotification (Windows 8 and later) calls a
// function on suspend and resume, without a window or a service control
// handler, so the agent hears them whether it runs as a service, a
// scheduled task or in a console. x/sys/windows has no wrapper for it.
var (
	powrprof       = windows.NewLazySystemDLL("powrprof.dll")
	procRegister   = powrprof.NewProc("PowerRegisterSuspendResumeNotification")
	procUnregister = powrprof.NewProc("PowerUnregisterSuspendResumeNotification")
)

const (
	deviceNotifyCallback  = 2    // DEVICE_NOTIFY_CALLBACK
	pbtAPMSuspend         = 0x4  // PBT_APMSUSPEND
	pbtAPMResumeAutomatic = 0x12 // PBT_APMRESUMEAUTOMATIC: every wake, once

	// suspendWait is how long the callback holds the suspend for the
	// announcement: Windows gives a PBT_APMSUSPEND callback about 2 s.
	suspendWait = 2 * time.Second
)

// subscribeParams is DEVICE_NOTIFY_SUBSCRIBE_PARAMETERS. Windows keeps the
// pointer while registered, so it is a package variable (never moved or
// freed), and only one Watch runs at a time.
type subscribeParams struct {
	callback uintptr
	context  uintptr
}

var (
	params   subscribeParams
	callback = windows.NewCallback(onPowerEvent) // callbacks are never freed: one for the process
	watching atomic.Pointer[chan notice]         // the running Watch's, nil when none
)

type notice struct {
	kind uint32
	done chan struct{} // closed when OnSleep returned (suspend only)
}

// onPowerEvent runs on a thread of Windows'; it hands the event to Watch
// and, for a suspend, waits (bounded) until the announcement is out,
// because returning is what lets Windows suspend.
func onPowerEvent(_ uintptr, kind uint32, _ uintptr) uintptr {
	ch := watching.Load()
	if ch == nil {
		return 0
	}
	n := notice{kind: kind, done: make(chan struct{})}
	select {
	case *ch <- n:
	default:
		return 0
	}
	if kind == pbtAPMSuspend {
		t := time.NewTimer(suspendWait)
		defer t.Stop()
		select {
		case <-n.done:
		case <-t.C:
		}
	}
	return 0
}

// Watch calls cfg.OnSleep before each suspend and cfg.OnResume after each
// resume until ctx ends (then it returns nil), and cfg.OnReady once the
// notification is registered. Before Windows 8 it returns ErrUnsupported.
func Watch(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := procRegister.Find(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	ch := make(chan notice, 4)
	if !watching.CompareAndSwap(nil, &ch) {
		return errors.New("power: Watch is already running")
	}
	defer watching.Store(nil)
	params = subscribeParams{callback: callback}
	var handle uintptr
	r, _, _ := procRegister.Call(deviceNotifyCallback, uintptr(unsafe.Pointer(&params)), uintptr(unsafe.Pointer(&handle)))
	if r != 0 {
		return fmt.Errorf("%w: PowerRegisterSuspendResumeNotification: %w", ErrUnavailable, syscall.Errno(r))
	}
	defer procUnregister.Call(handle)
	cfg.Logger.Debug("power: registered for suspend and resume notifications")
	cfg.OnReady()

	sleeping := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case n := <-ch:
			switch n.kind {
			case pbtAPMSuspend:
				sleeping = true
				cfg.Logger.Info("power: the system is going to sleep")
				sctx, cancel := context.WithTimeout(ctx, min(cfg.SleepTimeout, suspendWait))
				cfg.OnSleep(sctx)
				cancel()
				close(n.done)
			case pbtAPMResumeAutomatic:
				// Every wake sends it once; PBT_APMRESUMESUSPEND follows
				// when a user is there, and is not needed for a Resume.
				if sleeping {
					cfg.Logger.Info("power: the system woke up")
				}
				sleeping = false
				cfg.OnResume(ctx)
			}
		}
	}
}
