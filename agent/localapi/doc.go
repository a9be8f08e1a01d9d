// Package localapi is the device agent's local API: the HTTP server a
// desktop app (any language) uses to find the running agent, show its state
// live, edit which projects the device serves, and review proposals bound to
// their content hash. docs/localapi.md is the guide for app developers;
// openapi.json, embedded and served, is the contract.
//
// Transport. There is no TCP listener. On Linux and macOS the server listens
// on a unix socket in a directory only the user can enter (0700; the socket
// itself 0600) under $XDG_RUNTIME_DIR/roomrelay, else in the state dir, and
// in a hashed directory under the user's runtime dir or home when that path
// would not fit a socket address (never under a shared directory such as
// /tmp); every directory above it must be the user's or root's and
// writable by nobody else unless sticky. Clients (Discover, Dial) check
// that the discovery file, the socket and the process answering on it are
// their own user's before they speak (ErrNotOwned). On Windows it is a named pipe whose security descriptor
// grants only the user and SYSTEM, created first-instance so a name another
// process took (squatting) refuses to start. Listen and PeerOf are the two
// per-OS functions; a discovery file, localapi.json in the config dir, names
// the endpoint, the agent's pid and boot id and the API version.
//
// Who may call. Every connection's peer is identified (SO_PEERCRED on Linux,
// LOCAL_PEERCRED on macOS, the pipe client's process token on Windows) and
// must be the agent's own user. Every request is refused when it looks like
// a browser's (an Origin or Referer header), names another Host, or carries
// a body over MaxBody; connections past MaxConns are shed. Each refusal is
// written to the audit log with the peer's uid and pid, at most RefusalBurst
// at once and RefusalsPerMinute after that; the rest answer rate_limited.
//
// Threat model: other OS users and the network are kept out. A process
// running as the same user could already edit the policy file or the store,
// so the API does not pretend to stop it; it records who decided (the
// decided_via the client names, its pid and executable) in the audit log.
//
// Events. Events is a bounded ring (RingSize entries) of typed events with
// sequence numbers (the types and their data are agent/events'); the
// daemon's one publisher writes into it, for the daemon, the room provider
// and this package's own routes, and GET /localapi/v1/events streams it as newline-delimited JSON with resume
// (since=), a resync line when the ring no longer holds the point asked for
// or the agent restarted (another boot id), and a ping line every PingEvery.
//
// The package reads no flags and no environment: the daemon hands it a
// Config. It is owned by the daemon's Run: Server.Run serves until its
// context ends, with one goroutine per open connection.
package localapi
