package localapi

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// peerCred reads SO_PEERCRED: the uid and pid the kernel recorded when the
// peer connected (not forgeable by the peer).
func peerCred(fd int) (Peer, error) {
	u, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return Peer{}, err
	}
	p := Peer{UID: int(u.Uid), PID: int(u.Pid)}
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/exe"); err == nil {
		p.Exe = exe
	}
	return p, nil
}
