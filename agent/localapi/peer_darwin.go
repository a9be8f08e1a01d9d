package localapi

import "golang.org/x/sys/unix"

// peerCred reads LOCAL_PEERCRED (the peer's uid) and LOCAL_PEERPID. The
// executable is not looked up: that needs proc_pidpath (cgo).
func peerCred(fd int) (Peer, error) {
	x, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return Peer{}, err
	}
	p := Peer{UID: int(x.Uid)}
	if pid, err := unix.GetsockoptInt(fd, unix.SOL_LOCAL, unix.LOCAL_PEERPID); err == nil {
		p.PID = pid
	}
	return p, nil
}
