package localapi

// The named pipe itself, on golang.org/x/sys/windows: a net.Listener whose
// Accept waits in an overlapped ConnectNamedPipe that Close interrupts, and
// a net.Conn that is an *os.File on the overlapped handle (Go associates it
// with the runtime's I/O completion port, so reads and writes honour
// deadlines and a Close unblocks them).
//
// Why not go-winio (measured under Wine 10, see docs/localapi.md): its
// ListenPipe keeps a first instance opened with SYNCHRONIZE access only,
// which Windows' pipe file system leaves disconnected so clients skip it.
// Wine puts every new instance in the listening state and hands a client
// the oldest listener, that first instance, which nobody ever accepts on:
// the client connects and Accept never returns. Here every instance is a
// real one that ConnectNamedPipe waits on.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// pipeBuffer is each direction's buffer size (a hint to the OS).
const pipeBuffer = 64 << 10

// pipeAddr is a pipe's name as a net.Addr.
type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

// pipeListener serves one pipe name. It always holds one instance waiting
// for the next client (next, or the one an Accept waits on), so the name
// is never free for another process between two connections.
type pipeListener struct {
	name   string
	name16 *uint16
	sa     *windows.SecurityAttributes
	stop   windows.Handle // event: set by Close, wakes a waiting Accept
	closed atomic.Bool

	acceptMu sync.Mutex // one Accept at a time; Close waits for it
	mu       sync.Mutex
	next     windows.Handle // the instance the next Accept waits on (0: none)
}

// listenPipe creates the pipe's first instance with FILE_FLAG_FIRST_PIPE_INSTANCE
// and the security descriptor sddl: a name another process holds fails here.
func listenPipe(name, sddl string) (*pipeListener, error) {
	sd, err := windows.SecurityDescriptorFromString(sddl)
	if err != nil {
		return nil, fmt.Errorf("security descriptor: %w", err)
	}
	name16, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return nil, err
	}
	l := &pipeListener{name: name, name16: name16,
		sa: &windows.SecurityAttributes{Length: uint32(unsafe.Sizeof(windows.SecurityAttributes{})), SecurityDescriptor: sd}}
	if l.next, err = l.instance(true); err != nil {
		return nil, err
	}
	if l.stop, err = windows.CreateEvent(nil, 1, 0, nil); err != nil {
		windows.CloseHandle(l.next)
		return nil, fmt.Errorf("create event: %w", err)
	}
	return l, nil
}

// procCreateNamedPipeW is called directly, not through x/sys's wrapper,
// for the last error of a call that succeeded (below).
var procCreateNamedPipeW = windows.NewLazySystemDLL("kernel32.dll").NewProc("CreateNamedPipeW")

// instance creates one overlapped, byte-mode server instance that refuses
// remote clients. The first one must create the pipe: Windows refuses
// FILE_FLAG_FIRST_PIPE_INSTANCE on a name that exists (ERROR_ACCESS_DENIED);
// Wine ignores the flag (it always opens-or-creates) and says
// ERROR_ALREADY_EXISTS on success instead, which is refused the same way.
func (l *pipeListener) instance(first bool) (windows.Handle, error) {
	flags := uint32(windows.PIPE_ACCESS_DUPLEX | windows.FILE_FLAG_OVERLAPPED)
	if first {
		flags |= windows.FILE_FLAG_FIRST_PIPE_INSTANCE
	}
	mode := uint32(windows.PIPE_TYPE_BYTE | windows.PIPE_READMODE_BYTE | windows.PIPE_WAIT | windows.PIPE_REJECT_REMOTE_CLIENTS)
	r, _, lastErr := procCreateNamedPipeW.Call(uintptr(unsafe.Pointer(l.name16)), uintptr(flags), uintptr(mode),
		windows.PIPE_UNLIMITED_INSTANCES, pipeBuffer, pipeBuffer, 0, uintptr(unsafe.Pointer(l.sa)))
	h := windows.Handle(r)
	if h == windows.InvalidHandle {
		if lastErr == nil || lastErr == windows.ERROR_SUCCESS {
			lastErr = windows.ERROR_INVALID_HANDLE
		}
		return 0, lastErr
	}
	if first && errors.Is(lastErr, windows.ERROR_ALREADY_EXISTS) {
		windows.CloseHandle(h)
		return 0, windows.ERROR_ACCESS_DENIED
	}
	return h, nil
}

// Accept waits for a client on the waiting instance, puts a new instance
// in its place, and returns the connection. Close makes it return
// net.ErrClosed.
func (l *pipeListener) Accept() (net.Conn, error) {
	l.acceptMu.Lock()
	defer l.acceptMu.Unlock()
	for {
		if l.closed.Load() {
			return nil, net.ErrClosed
		}
		l.mu.Lock()
		h := l.next
		l.next = 0
		l.mu.Unlock()
		if h == 0 {
			var err error
			if h, err = l.instance(false); err != nil {
				return nil, fmt.Errorf("local api: new pipe instance: %w", err)
			}
		}
		err := l.connect(h)
		if errors.Is(err, windows.ERROR_NO_DATA) {
			// The client came and went before we saw it.
			windows.CloseHandle(h)
			continue
		}
		if err != nil {
			windows.CloseHandle(h)
			if errors.Is(err, net.ErrClosed) {
				return nil, err
			}
			return nil, fmt.Errorf("local api: accept on %s: %w", l.name, err)
		}
		// The next instance before this one is handed out: a client that
		// closes at once must not leave the name without an instance.
		nh, nerr := l.instance(false)
		l.mu.Lock()
		if nerr == nil {
			if l.closed.Load() {
				windows.CloseHandle(nh)
			} else {
				l.next = nh
			}
		}
		l.mu.Unlock()
		c, err := newPipeConn(h, l.name)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

// connect waits in an overlapped ConnectNamedPipe for a client or for
// Close, whichever comes first.
func (l *pipeListener) connect(h windows.Handle) error {
	ev, err := windows.CreateEvent(nil, 1, 0, nil)
	if err != nil {
		return fmt.Errorf("create event: %w", err)
	}
	defer windows.CloseHandle(ev)
	ov := &windows.Overlapped{HEvent: ev}
	err = windows.ConnectNamedPipe(h, ov)
	switch {
	case err == nil, errors.Is(err, windows.ERROR_PIPE_CONNECTED):
		return nil
	case !errors.Is(err, windows.ERROR_IO_PENDING):
		return err
	}
	which, err := windows.WaitForMultipleObjects([]windows.Handle{ev, l.stop}, false, windows.INFINITE)
	if err != nil || which != windows.WAIT_OBJECT_0 {
		// Closed (or the wait failed): cancel, and wait until the OS is done
		// with ov before it goes out of scope.
		windows.CancelIoEx(h, ov)
		var n uint32
		windows.GetOverlappedResult(h, ov, &n, true)
		if err != nil {
			return fmt.Errorf("wait for a client: %w", err)
		}
		return net.ErrClosed
	}
	var n uint32
	return windows.GetOverlappedResult(h, ov, &n, false)
}

// Close stops the listener: a waiting Accept returns net.ErrClosed, and
// the waiting instance is closed, which frees the name. Open connections
// are not touched.
func (l *pipeListener) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	windows.SetEvent(l.stop)
	l.acceptMu.Lock() // the waiting Accept, if any, has returned
	defer l.acceptMu.Unlock()
	l.mu.Lock()
	if l.next != 0 {
		windows.CloseHandle(l.next)
		l.next = 0
	}
	l.mu.Unlock()
	return windows.CloseHandle(l.stop)
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr(l.name) }

// pipeConn is one end of a connected pipe.
type pipeConn struct {
	f *os.File
	h windows.Handle
	a pipeAddr
}

// newPipeConn wraps a connected overlapped handle. os.NewFile sees the
// handle is overlapped and puts it on the runtime's completion port; a
// handle it could not (deadlines would then not work) is refused.
func newPipeConn(h windows.Handle, name string) (*pipeConn, error) {
	f := os.NewFile(uintptr(h), name)
	if err := f.SetDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("local api: pipe %s has no deadlines: %w", name, err)
	}
	return &pipeConn{f: f, h: h, a: pipeAddr(name)}, nil
}

func (c *pipeConn) Read(b []byte) (int, error) {
	n, err := c.f.Read(b)
	return n, pipeErr(err)
}

func (c *pipeConn) Write(b []byte) (int, error) {
	n, err := c.f.Write(b)
	return n, pipeErr(err)
}

// Close closes the handle; data already written stays readable by the
// other end (no DisconnectNamedPipe, which would drop it).
func (c *pipeConn) Close() error                       { return pipeErr(c.f.Close()) }
func (c *pipeConn) LocalAddr() net.Addr                { return c.a }
func (c *pipeConn) RemoteAddr() net.Addr               { return c.a }
func (c *pipeConn) SetDeadline(t time.Time) error      { return c.f.SetDeadline(t) }
func (c *pipeConn) SetReadDeadline(t time.Time) error  { return c.f.SetReadDeadline(t) }
func (c *pipeConn) SetWriteDeadline(t time.Time) error { return c.f.SetWriteDeadline(t) }

// pipeErr maps the pipe's "other end went away" errors to io.EOF, a closed
// file to net.ErrClosed and a deadline to the bare net.Error that net/http
// tests for with a type assertion, as a network connection reports them.
func pipeErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return os.ErrDeadlineExceeded
	case errors.Is(err, windows.ERROR_BROKEN_PIPE), errors.Is(err, windows.ERROR_PIPE_NOT_CONNECTED), errors.Is(err, windows.ERROR_NO_DATA):
		return io.EOF
	case errors.Is(err, os.ErrClosed):
		return net.ErrClosed
	}
	return err
}

// dialPipe connects to the pipe name, retrying while every instance is
// busy, until ctx ends. The client gives the server only anonymous
// impersonation rights, and refuses a server that runs as another user (a
// process that took the name while no agent held it).
func dialPipe(ctx context.Context, name string) (net.Conn, error) {
	name16, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return nil, err
	}
	for {
		h, err := windows.CreateFile(name16, windows.GENERIC_READ|windows.GENERIC_WRITE, 0, nil, windows.OPEN_EXISTING,
			windows.FILE_FLAG_OVERLAPPED|windows.SECURITY_SQOS_PRESENT|windows.SECURITY_ANONYMOUS, 0)
		if err == nil {
			if err := checkServer(h); err != nil {
				windows.CloseHandle(h)
				return nil, fmt.Errorf("local api: %s: %w", name, err)
			}
			return newPipeConn(h, name)
		}
		if !errors.Is(err, windows.ERROR_PIPE_BUSY) {
			return nil, fmt.Errorf("local api: dial %s: %w", name, err)
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("local api: dial %s: every instance busy: %w", name, ctx.Err())
		case <-t.C:
		}
	}
}

// checkServer refuses a pipe whose server process runs as another user.
func checkServer(h windows.Handle) error {
	var pid uint32
	if err := windows.GetNamedPipeServerProcessId(h, &pid); err != nil {
		return fmt.Errorf("server pid: %w", err)
	}
	sid, err := processSID(pid)
	if err != nil {
		return fmt.Errorf("server process %d: %w", pid, err)
	}
	own, err := userSID()
	if err != nil {
		return err
	}
	if sid != own {
		return fmt.Errorf("the pipe's server (pid %d) runs as %s, not as this user (%s): not our agent", pid, sid, own)
	}
	return nil
}

// processSID is the user SID of process pid's token.
func processSID(pid uint32) (string, error) {
	ph, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, pid)
	if err != nil {
		return "", fmt.Errorf("open process: %w", err)
	}
	defer windows.CloseHandle(ph)
	var tok windows.Token
	if err := windows.OpenProcessToken(ph, windows.TOKEN_QUERY, &tok); err != nil {
		return "", fmt.Errorf("process token: %w", err)
	}
	defer tok.Close()
	u, err := tok.GetTokenUser()
	if err != nil {
		return "", fmt.Errorf("token user: %w", err)
	}
	return u.User.Sid.String(), nil
}
