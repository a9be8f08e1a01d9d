package oauth

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// registerFrom posts a registration as if from addr (the handler reads
// the request's peer address, as behind no proxy).
func (m *memAS) registerFrom(addr string) (int, string) {
	body := `{"redirect_uris":["http://127.0.0.1/callback"],"client_name":"flood ` + strings.Repeat("x", 60) + `"}`
	req := httptest.NewRequest(http.MethodPost, PathRegister, strings.NewReader(body))
	req.RemoteAddr = addr
	w := httptest.NewRecorder()
	m.s.serveRegister(w, req)
	id := ""
	if i := strings.Index(w.Body.String(), `"client_id":"`); i >= 0 {
		id = strings.SplitN(w.Body.String()[i+13:], `"`, 2)[0]
	}
	return w.Code, id
}

// TestRegistrationsCountedByPrefix (#29.3): registrations were counted
// per full address, so one IPv6 /64 registered without end; now per /64,
// and per /48 across /64s.
func TestRegistrationsCountedByPrefix(t *testing.T) {
	m := newMemAS(t, nil)
	ok := 0
	for i := range 1000 {
		if code, _ := m.registerFrom(fmt.Sprintf("[2001:db8:0:1::%x]:4000", i+1)); code == http.StatusCreated {
			ok++
		}
	}
	t.Logf("1000 registrations from one IPv6 /64 in a minute: %d accepted", ok)
	if ok != 20 {
		t.Errorf("one /64 registered %d clients in a minute, want 20", ok)
	}
	ok = 0
	for i := range 1000 {
		if code, _ := m.registerFrom(fmt.Sprintf("[2001:db8:0:%x::1]:4000", i+2)); code == http.StatusCreated {
			ok++
		}
	}
	t.Logf("1000 registrations from 1000 /64s of one /48 in a minute: %d accepted", ok)
	if ok != registerPerAggr*20-20 {
		t.Errorf("one /48 registered %d clients in a minute, want %d", ok, registerPerAggr*20-20)
	}
}

// TestRegistrationsFullStoreEvictsUnused (#29.3): a registration that
// never signed in expires within hours; a full table evicts never-used
// registrations first, so a flood from many networks neither refuses new
// registrations nor touches a client that signed in.
func TestRegistrationsFullStoreEvictsUnused(t *testing.T) {
	m := newMemAS(t, nil)
	m.st.SetMaxBytes(TableClients, 64<<10)
	_, known := m.registerFrom("192.0.2.1:4000")
	if _, err := m.exchange(known, m.code(known)); err != nil {
		t.Fatal(err)
	}
	// A flood from many networks (distinct /24s: each under its limits).
	byStatus := map[int]int{}
	start := time.Now()
	n := 0
	for ; n < 3000 && time.Since(start) < 10*time.Second; n++ {
		code, _ := m.registerFrom(fmt.Sprintf("198.%d.%d.1:4000", 18+n/250, n%250))
		byStatus[code]++
	}
	t.Logf("registration flood: %d from %d /24s in %v into a 64 KiB table: %v, the table holds %d bytes",
		n, n, time.Since(start).Round(time.Millisecond), byStatus, m.st.Bytes(TableClients))
	if byStatus[http.StatusServiceUnavailable] > 0 {
		t.Errorf("a full table refused registrations instead of evicting never-used ones: %v", byStatus)
	}
	if _, _, err := getRec[clientRec](t.Context(), m.st, clientKey(known)); err != nil {
		t.Fatalf("the client that signed in was evicted: %v", err)
	}
	if code, _ := m.registerFrom("192.0.2.7:4000"); code != http.StatusCreated {
		t.Fatalf("a new registration after the flood: %d", code)
	}
	// Never-used registrations expire within hours; the used one stays.
	m.clock.advance(unusedClientTTL + time.Minute)
	keys, _ := m.st.Keys(t.Context(), TableClients, clientPrefix)
	if len(keys) != 1 || keys[0] != clientKey(known).k {
		t.Fatalf("after %v the clients table holds %d registrations, want only the one that signed in", unusedClientTTL, len(keys))
	}
}
