package oauth

import "testing"

// TestLoopbackRedirectAnyPort: RFC 8252 §7.3. Claude Code registers
// http://localhost:PORT/callback with the port it opened and may call back
// on another one at a later sign-in; any loopback port matches a loopback
// registration with the same host and path, nothing else loosens.
func TestLoopbackRedirectAnyPort(t *testing.T) {
	s := &Server{cfg: Config{RedirectHosts: DefaultRedirectHosts}}
	for _, reg := range []string{"http://localhost:54545/callback", "http://localhost/callback", "http://127.0.0.1:33333/callback", "http://[::1]:8080/callback"} {
		if why := s.checkRedirect(reg); why != "" {
			t.Errorf("register %s: refused (%s)", reg, why)
		}
	}
	for _, c := range []struct {
		registered, got string
		want            bool
	}{
		{"http://localhost:54545/callback", "http://localhost:54545/callback", true},
		{"http://localhost:54545/callback", "http://localhost:61000/callback", true},
		{"http://localhost:54545/callback", "http://localhost/callback", true},
		{"http://localhost/callback", "http://localhost:61000/callback", true},
		{"http://127.0.0.1:33333/callback", "http://127.0.0.1:1/callback", true},
		{"http://[::1]:8080/callback", "http://[::1]:65535/callback", true},
		{"http://localhost:54545/callback", "http://localhost:61000/other", false},
		{"http://localhost:54545/callback", "http://127.0.0.1:54545/callback", false},
		{"http://localhost:54545/callback", "http://localhost:61000/callback?x=1", false},
		{"http://localhost:54545/callback", "http://u@localhost:61000/callback", false},
		{"http://localhost:54545/callback", "https://localhost:61000/callback", false},
		{"http://localhost:54545/callback", "http://localhost.evil.example:61000/callback", false},
		{"https://claude.ai/api/mcp/auth_callback", "https://claude.ai:8443/api/mcp/auth_callback", false},
	} {
		if got := redirectMatches([]string{c.registered}, c.got); got != c.want {
			t.Errorf("registered %s, redirect %s: match %v, want %v", c.registered, c.got, got, c.want)
		}
	}
}
