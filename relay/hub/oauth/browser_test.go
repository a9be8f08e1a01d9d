package oauth

import (
	"html/template"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/internal/testutil/webdriver"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// callbackPage is the MCP client's loopback callback, as a browser shows
// it: the parameters it received.
var callbackPage = template.Must(template.New("cb").Parse(`<!doctype html><html><head><meta charset="utf-8"><title>callback</title></head>
<body><h1 id="cb">Callback received</h1><ul>{{range $k, $v := .}}<li><code>{{$k}}</code> = <code>{{index $v 0}}</code></li>{{end}}</ul></body></html>`))

// TestSignInInBrowser: the sign-in pages in headless Chromium, as people
// use them. The approver opens their login link (signed in), the consent
// form (client, where the browser goes back to, project, access, the
// lifetimes), approves, and the browser lands on the client's loopback
// callback with code, state and iss; the code redeems. Then, with nobody
// signed in, the consent page shows a device code; "continue" leads to the
// wait page, the laptop approves with its device token, and the page
// (refreshing itself) goes on to the callback. Screenshots go to
// ROOMRELAY_ARTIFACTS (dist/artifacts/browser in CI).
func TestSignInInBrowser(t *testing.T) {
	chromium, driver := webdriver.Look(t)
	ta := startAS(t, nil)
	cb := testutil.Serve(t, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = callbackPage.Execute(w, r.URL.Query())
	}))
	redirect := cb.URL() + "/callback"
	client := ta.register("http://127.0.0.1/callback")
	dir := webdriver.ArtifactDir(t)
	wd := webdriver.Start(t, chromium, driver)

	// The approver's login link.
	login, err := ta.cl.AddApprover(t.Context(), hubapi.ApproverRequest{Name: "Alice Approver", Projects: []string{"p1"}, MaxScope: hubapi.ScopeWrite})
	if err != nil {
		t.Fatal(err)
	}
	wd.Navigate(login.LoginURL)
	if h := wd.WaitText("h1", "Signed in"); h != "Signed in" {
		t.Fatalf("login link: h1 %q", h)
	}
	if p := wd.Text(wd.Find("p")); !strings.Contains(p, "Alice Approver") || !strings.Contains(p, "p1") {
		t.Errorf("signed-in page: %q", p)
	}
	wd.ScreenshotPage(filepath.Join(dir, "oauth-login.png"))

	// The consent form, then the redirect to the loopback callback.
	checkCallback := func(state string) url.Values {
		t.Helper()
		if h := wd.WaitText("#cb", "Callback received"); h != "Callback received" {
			t.Fatalf("not on the callback: %q at %s", h, wd.URL())
		}
		u, err := url.Parse(wd.URL())
		if err != nil || !strings.HasPrefix(wd.URL(), redirect+"?") {
			t.Fatalf("landed on %s, want %s?…", wd.URL(), redirect)
		}
		q := u.Query()
		if q.Get("code") == "" || q.Get("iss") != ta.url || q.Get("state") != state {
			t.Fatalf("callback parameters %v: want code, iss %s and state %s", q, ta.url, state)
		}
		return q
	}
	wd.Navigate(ta.authorizeURL(authReq{client: client, redirect: redirect, state: "browser-1"}))
	if h := wd.WaitText("h1", "Allow Test <b>client</b>?"); h != "Allow Test <b>client</b>?" {
		t.Fatalf("consent page: h1 %q", h)
	}
	body := wd.Text(wd.Find("body"))
	for _, want := range []string{"unverified", "Signed in as Alice Approver", "this computer (127.0.0.1, port", "Access lasts 1h at a time", "up to 30 days idle",
		"roomrelay oauth approve"} {
		if !strings.Contains(body, want) {
			t.Errorf("consent page lacks %q:\n%s", want, body)
		}
	}
	if opts := wd.FindAll(`select[name="project"] option`); len(opts) != 1 || wd.Text(opts[0]) != "p1" {
		t.Errorf("project choices: %d", len(opts))
	}
	wd.ScreenshotPage(filepath.Join(dir, "oauth-consent.png"))
	wd.Click(wd.Find(`button[value="approve"]`))
	q := checkCallback("browser-1")
	wd.ScreenshotPage(filepath.Join(dir, "oauth-callback.png"))
	if r := ta.exchange(client, q.Get("code"), redirect); r.status != 200 {
		t.Fatalf("exchange of the browser's code: %d %s", r.status, r.body)
	}

	// Nobody signed in: the device code and the wait page.
	wd.Call(http.MethodDelete, wd.S("/cookie"), nil)
	wd.Navigate(ta.authorizeURL(authReq{client: client, redirect: redirect, state: "browser-2"}))
	code := wd.Text(wd.Find("p.code"))
	m := userCodeRe.FindStringSubmatch(code)
	if m == nil {
		t.Fatalf("no device code on the page: %q", code)
	}
	if n := len(wd.FindAll(`button[value="approve"]`)); n != 0 {
		t.Errorf("the consent form is shown to a browser nobody signed in: %d approve buttons", n)
	}
	wd.ScreenshotPage(filepath.Join(dir, "oauth-consent-device.png"))
	wd.Click(wd.Find(`form[action="` + PathWait + `"] button`))
	if h := wd.WaitText("h1", "Approve on your device"); h != "Approve on your device" {
		t.Fatalf("wait page: h1 %q", h)
	}
	if c := wd.Text(wd.Find("p.code")); c != code {
		t.Errorf("wait page shows %q, the consent page %q", c, code)
	}
	wd.ScreenshotPage(filepath.Join(dir, "oauth-device-wait.png"))
	if r := ta.deviceCall(http.MethodPost, m[1], ta.devTok, hubapi.OAuthDecision{Approve: true}); r.status != 200 {
		t.Fatalf("approve on the device: %d %s", r.status, r.body)
	}
	checkCallback("browser-2")
	wd.ScreenshotPage(filepath.Join(dir, "oauth-device-callback.png"))
}
