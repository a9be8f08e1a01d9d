package oauth

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// wrongCode is a code-shaped code with the first group of like (or a
// fixed one) that is not like; i picks the second group.
func wrongCode(like string, i int) string {
	a := userCodeAlphabet
	group := "BCDF"
	if like != "" {
		group = like[:4]
	}
	s := string([]byte{a[i/729%27], a[i/27%27], a[i%27], a[(i/19683)%27]})
	if like != "" && s == like[5:] {
		s = string([]byte{a[(i+1)/729%27], a[(i+1)/27%27], a[(i+1)%27], a[((i+1)/19683)%27]})
	}
	return group + "-" + s
}

// TestDeviceCodeGuessing (#29.9): an enrolled device could try ~3,800
// device-approval codes a second, none refused. Now a device gets 10
// unknown codes per 5 minutes (then 429 on every lookup), and a code dies
// after 5 wrong tries against it (same first group), whoever makes them.
func TestDeviceCodeGuessing(t *testing.T) {
	ta := startAS(t, nil)
	client := ta.register("http://127.0.0.1/cb")
	page := do(t, browser(t), http.MethodGet, ta.authorizeURL(authReq{client: client, redirect: "http://127.0.0.1:5555/cb"}), nil)
	m := userCodeRe.FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("no device code on the page: %s", page.body)
	}
	code := m[1]

	// Per code: four wrong tries against it leave it usable; the fifth,
	// from another device, kills it even for its owner.
	guesser1, _ := ta.enroll("p1", "guesser-1")
	guesser2, _ := ta.enroll("p2", "guesser-2")
	for i := range guessMissesPerCode - 1 {
		if r := ta.deviceCall(http.MethodGet, wrongCode(code, i), guesser1, nil); r.status != 404 {
			t.Fatalf("wrong try %d against the code: %d %s", i+1, r.status, r.body)
		}
	}
	if r := ta.deviceCall(http.MethodGet, code, ta.devTok, nil); r.status != 200 {
		t.Fatalf("the code after %d wrong tries: %d %s, want it still usable", guessMissesPerCode-1, r.status, r.body)
	}
	if r := ta.deviceCall(http.MethodGet, wrongCode(code, 100), guesser2, nil); r.status != 404 {
		t.Fatalf("the last wrong try: %d", r.status)
	}
	r := ta.deviceCall(http.MethodGet, code, ta.devTok, nil)
	if r.status != 404 || !strings.Contains(r.body, "wrong tries") {
		t.Errorf("the code after %d wrong tries against it: %d %s, want 404 naming the wrong tries", guessMissesPerCode, r.status, r.body)
	}

	// Per device: a flood of unknown codes from one device.
	flooder, _ := ta.enroll("p1", "flooder")
	const tries = 200
	looked, limited := 0, 0
	t0 := time.Now()
	for i := range tries {
		switch r := ta.deviceCall(http.MethodGet, wrongCode("", 1000+i), flooder, nil); r.status {
		case 404:
			looked++
		case 429:
			limited++
		default:
			t.Fatalf("guess %d: %d %s", i, r.status, r.body)
		}
	}
	t.Logf("one device, %d unknown codes in %v: %d looked up, %d refused 429", tries, time.Since(t0).Round(time.Millisecond), looked, limited)
	if looked != guessMissesPerDevice || limited != tries-guessMissesPerDevice {
		t.Errorf("looked up %d of %d guesses, want %d", looked, tries, guessMissesPerDevice)
	}
	// Another device is not held back by the flooder; the flooder is
	// again after the window.
	if r := ta.deviceCall(http.MethodGet, wrongCode("", 5000), ta.devTok, nil); r.status != 404 {
		t.Errorf("another device during the flood: %d, want 404", r.status)
	}
	ta.clock.advance(guessWindow)
	if r := ta.deviceCall(http.MethodGet, wrongCode("", 5001), flooder, nil); r.status != 404 {
		t.Errorf("the flooder after the window: %d, want 404", r.status)
	}
}
