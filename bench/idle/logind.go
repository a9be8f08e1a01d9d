package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/godbus/dbus/v5"
)

// fakeLogind is what a laptop's agent finds on its system bus: a private
// dbus-daemon with org.freedesktop.login1 owned by the bench, answering
// Inhibit with a pipe (as logind does with a FIFO) and never signalling
// (the machine does not sleep during the bench). The agent is pointed at
// it with DBUS_SYSTEM_BUS_ADDRESS, so it runs as it does where logind
// reports sleep and wake.
type fakeLogind struct {
	cmd  *exec.Cmd
	conn *dbus.Conn
	mu   sync.Mutex
	keep []*os.File // the lock pipes' ends, held for the run
	Addr string
}

func startLogind(ctx context.Context, dir string) (*fakeLogind, error) {
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		return nil, fmt.Errorf("-logind needs dbus-daemon (Debian package dbus): %w", err)
	}
	conf := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=`+filepath.Join(dir, "system_bus")+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "--config-file="+conf, "--nofork", "--print-address")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dbus-daemon: %w", err)
	}
	f := &fakeLogind{cmd: cmd}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		f.stop()
		return nil, fmt.Errorf("dbus-daemon printed no address: %w", err)
	}
	f.Addr = strings.TrimSpace(line)
	if f.conn, err = dbus.Connect(f.Addr); err != nil {
		f.stop()
		return nil, fmt.Errorf("connect to the bench's bus: %w", err)
	}
	if err := f.conn.Export(f, "/org/freedesktop/login1", "org.freedesktop.login1.Manager"); err != nil {
		f.stop()
		return nil, err
	}
	if reply, err := f.conn.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		f.stop()
		return nil, fmt.Errorf("own org.freedesktop.login1: %v %v", reply, err)
	}
	return f, nil
}

// Inhibit is logind's: a delay lock is a pipe's write end.
func (f *fakeLogind) Inhibit(what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	f.mu.Lock()
	f.keep = append(f.keep, r, w)
	f.mu.Unlock()
	return dbus.UnixFD(w.Fd()), nil
}

func (f *fakeLogind) stop() {
	if f.conn != nil {
		f.conn.Close()
	}
	f.cmd.Process.Kill()
	f.cmd.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.keep {
		p.Close()
	}
}

// locks is how many inhibitor locks the agent took.
func (f *fakeLogind) locks() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.keep) / 2
}
