package oauth

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

var userCodeRe = regexp.MustCompile(`roomrelay oauth approve ([A-Z0-9]{4}-[A-Z0-9]{4})`)

func (ta *testAS) deviceCall(method, code, token string, body any) resp {
	ta.t.Helper()
	req, _ := http.NewRequest(method, ta.url+PathDeviceApprov+code, nil)
	if body != nil {
		b, _ := json.Marshal(body)
		req, _ = http.NewRequest(method, ta.url+PathDeviceApprov+code, strings.NewReader(string(b)))
	}
	req.Header.Set("Authorization", "Bearer "+token)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		ta.t.Fatal(err)
	}
	defer r.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(r.Body).Decode(&m)
	b, _ := json.Marshal(m)
	return resp{r.StatusCode, r.Header, string(b)}
}

func (ta *testAS) enroll(project, name string, rooms ...relay.RoomEntry) (token, id string) {
	ta.t.Helper()
	pc, err := ta.cl.Pair(ta.t.Context(), project, 0)
	if err != nil {
		ta.t.Fatal(err)
	}
	en, err := ta.cl.Enroll(ta.t.Context(), pc.Code, name, "linux", "")
	if err != nil {
		ta.t.Fatal(err)
	}
	fakeDevice(ta.t, ta.url, en.Token, en.DeviceID, rooms)
	return en.Token, en.DeviceID
}

// TestDeviceApproval: nobody signed in; the device's owner approves with
// the code; a device of another project cannot; the grant reaches only
// the approving device's rooms and dies with the device.
func TestDeviceApproval(t *testing.T) {
	ta := startAS(t, nil)
	otherTok, _ := ta.enroll("p1", "desktop", relay.RoomEntry{Project: "p1", RoomID: "r3", Name: "three"})
	p2Tok, _ := ta.enroll("p2", "elsewhere")
	redirect := "http://127.0.0.1:5555/cb"
	client := ta.register("http://127.0.0.1/cb")
	c := browser(t)
	page := do(t, c, http.MethodGet, ta.authorizeURL(authReq{client: client, redirect: redirect}), nil)
	m := userCodeRe.FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("no device code on the page: %s", page.body)
	}
	code := m[1]
	f := form(page.body)
	wait := ta.url + PathWait + "?" + url.Values{"req": {f["req"]}, "code": {code}}.Encode()
	if r := do(t, c, http.MethodGet, wait, nil); r.status != 200 || !strings.Contains(r.body, code) {
		t.Fatalf("wait page before approval: %d", r.status)
	}
	if r := ta.deviceCall(http.MethodGet, code, "rrd_forged", nil); r.status != 401 {
		t.Errorf("a forged device token: %d", r.status)
	}
	if r := ta.deviceCall(http.MethodPost, code, p2Tok, hubapi.OAuthDecision{Approve: true, Project: "p1"}); r.status != 403 {
		t.Errorf("a device not enrolled for p1 approved it: %d %s", r.status, r.body)
	}
	got := ta.deviceCall(http.MethodGet, strings.ToLower(strings.ReplaceAll(code, "-", "")), ta.devTok, nil)
	if got.status != 200 || !strings.Contains(got.body, `"client_name":"Test \u003cb\u003eclient\u003c/b\u003e"`) || !strings.Contains(got.body, `"redirect_host":"127.0.0.1:5555"`) {
		t.Fatalf("device view: %d %s", got.status, got.body)
	}
	if r := ta.deviceCall(http.MethodPost, code, ta.devTok, hubapi.OAuthDecision{Approve: true}); r.status != 200 || !strings.Contains(r.body, `"scope":"read"`) {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	if r := ta.deviceCall(http.MethodPost, code, otherTok, hubapi.OAuthDecision{Approve: true}); r.status != 409 {
		t.Errorf("decided twice: %d", r.status)
	}
	r := do(t, c, http.MethodGet, wait, nil)
	q := location(t, r, redirect)
	tr := ta.exchange(client, q.Get("code"), redirect)
	if tr.status != 200 {
		t.Fatalf("exchange: %s", tr.body)
	}
	if r := do(t, browser(t), http.MethodGet, wait, nil); r.header.Get("Location") != "" {
		t.Error("another browser collected the code")
	}
	gs, _ := ta.as.Grants(t.Context(), "p1")
	if len(gs) != 1 || gs[0].ApprovedVia != "device" || gs[0].Device != ta.devID {
		t.Fatalf("grants %+v", gs)
	}
	cs := ta.session(tr.json(t)["access_token"].(string))
	testutil.Eventually(t, "rooms in the directory", func() bool {
		isErr, _ := callTool(t, cs, relay.CmdReadRoom, map[string]any{"room_id": "r1"})
		return !isErr
	})
	if isErr, text := callTool(t, cs, relay.CmdReadRoom, map[string]any{"room_id": "r3"}); !isErr || !strings.HasPrefix(text, "not_found") {
		t.Errorf("a room on another device: %v %q", isErr, text)
	}
	_, text := callTool(t, cs, "list_local_rooms", map[string]any{})
	if !strings.Contains(text, "r1") || strings.Contains(text, "r3") {
		t.Errorf("list_local_rooms of a device-bound grant: %q", text)
	}
	if _, err := ta.cl.Revoke(t.Context(), ta.devID); err != nil {
		t.Fatal(err)
	}
	if s := ta.mcpStatus(tr.json(t)["access_token"].(string)); s != 401 {
		t.Errorf("the grant outlived its device: %d", s)
	}
}
