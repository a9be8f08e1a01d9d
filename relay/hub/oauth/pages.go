package oauth

import (
	"crypto/rand"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The HTML pages: no JavaScript, no external resources, every value
// escaped by html/template (a client's name is whatever it registered).

const pageHead = `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
{{if .Refresh}}<meta http-equiv="refresh" content="2">{{end}}<title>roomrelay: {{.Title}}</title>
<style>body{font:16px/1.45 system-ui,sans-serif;max-width:40em;margin:2em auto;padding:0 1em;color:#222}
.box{border:1px solid #ccc;border-radius:6px;padding:1em;margin:1em 0}.warn{color:#8a4b00}.err{color:#a00}
code,.code{font-family:ui-monospace,monospace}.code{font-size:1.6em;letter-spacing:.1em}button{font-size:1em;padding:.4em 1.2em;margin-right:.6em}</style>
</head><body><h1>{{.Title}}</h1>`

var pages = template.Must(template.New("consent").Parse(pageHead + `
<div class="box">
<p><strong>{{.ClientName}}</strong> {{if .ClientHost}}<span>(as published by <strong>{{.ClientHost}}</strong>, a host the hub's operator allowed)</span>{{else}}<span class="warn">(unverified: this is the name the client gave itself)</span>{{end}}
wants to use the roomrelay hub's MCP tools.</p>
<p>After approval the browser is sent to <strong>{{.RedirectShown}}</strong><br><small><code>{{.RedirectURI}}</code></small></p>
<p>It asks for: <strong>{{if .WantsWrite}}read rooms, and propose apps{{else}}read rooms only{{end}}</strong>.</p>
</div>
{{if .Problem}}<p class="err">{{.Problem}}</p>{{end}}
{{if .Approver}}
<form method="post" action="{{.DecisionPath}}">
<input type="hidden" name="req" value="{{.ReqID}}"><input type="hidden" name="csrf" value="{{.CSRF}}">
<p>Signed in as <strong>{{.Approver}}</strong>.</p>
<p><label>Project: <select name="project">{{range .Projects}}<option>{{.}}</option>{{end}}</select></label></p>
<p><label><input type="radio" name="access" value="read" {{if not .WriteDefault}}checked{{end}}> Read rooms and app status</label><br>
{{if .CanWrite}}<label><input type="radio" name="access" value="write" {{if .WriteDefault}}checked{{end}}> Read, and propose apps
(every proposal still needs the owner's approval on the laptop before anything changes)</label>{{end}}</p>
<p>Access lasts {{.AccessTTL}} at a time and renews itself while the client is used (up to {{.RefreshTTL}} idle).
Revoke it any time: <code>roomrelay hub oauth grants</code> then <code>roomrelay hub oauth revoke GRANT</code> (the hub's operator).</p>
<button name="action" value="approve">Approve</button><button name="action" value="deny">Deny</button>
</form>
{{else}}
<div class="box"><p>Sign in first with the approver login link the hub's operator gave you, then start again from your MCP client.</p></div>
{{end}}
{{if .UserCode}}
<div class="box"><p><strong>Or approve on your device.</strong> On the laptop enrolled in the project, run:</p>
<p class="code">roomrelay oauth approve {{.UserCode}}</p>
<p>The grant then reaches only that device's rooms. Approve only a code you see in your own browser right now.
The code expires in {{.RequestTTL}}.</p>
<form method="get" action="{{.WaitPath}}"><input type="hidden" name="req" value="{{.ReqID}}"><input type="hidden" name="code" value="{{.UserCode}}">
<button>I approved it on my device: continue</button></form></div>
{{end}}
</body></html>`))

var waitPage = template.Must(template.New("wait").Parse(pageHead + `
<p>Waiting for the device's owner to run</p><p class="code">roomrelay oauth approve {{if .UserCode}}{{.UserCode}}{{else}}CODE{{end}}</p>
<p>This page refreshes itself; you can also reload it.</p></body></html>`))

var messagePage = template.Must(template.New("msg").Parse(pageHead + `<p{{if .Error}} class="err"{{end}}>{{.Message}}</p></body></html>`))

type pageData struct {
	Title, ClientName, ClientHost, RedirectShown, RedirectURI, ReqID, CSRF, Approver, Problem, UserCode string
	DecisionPath, WaitPath, AccessTTL, RefreshTTL, RequestTTL, Message                                  string
	Projects                                                                                            []string
	WantsWrite, CanWrite, WriteDefault, Refresh, Error                                                  bool
}

// redirectShown says where the browser goes, in words: for a loopback
// redirect "this computer (port N)".
func redirectShown(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	if u.Scheme == "http" && isLoopbackHost(u.Hostname()) {
		if p := u.Port(); p != "" {
			return "this computer (" + u.Hostname() + ", port " + p + ")"
		}
		return "this computer (" + u.Hostname() + ")"
	}
	if u.Host != "" {
		return u.Host
	}
	return u.Scheme + ": (an app on this computer)"
}

func (s *Server) renderConsent(w http.ResponseWriter, p *pendingRec, userCode string, ap *signedIn, problem string) {
	d := pageData{Title: "Allow " + p.ClientName + "?", ClientName: p.ClientName, ClientHost: p.ClientHost, RedirectShown: redirectShown(p.RedirectURI),
		RedirectURI: p.RedirectURI, ReqID: p.ID, CSRF: p.CSRF, Problem: problem, UserCode: userCode,
		DecisionPath: PathDecision, WaitPath: PathWait, WantsWrite: p.Scope == hubapi.ScopeWrite,
		AccessTTL: human(s.cfg.AccessTTL), RefreshTTL: human(s.cfg.RefreshTTL), RequestTTL: human(s.cfg.RequestTTL)}
	if ap != nil {
		d.Approver, d.Projects = ap.rec.Name, ap.rec.Projects
		d.CanWrite = d.WantsWrite && ap.rec.MaxScope == hubapi.ScopeWrite
		d.WriteDefault = d.CanWrite
	}
	s.page(w, http.StatusOK, pages, d)
}

func (s *Server) renderWait(w http.ResponseWriter, p *pendingRec, userCode string) {
	s.page(w, http.StatusOK, waitPage, pageData{Title: "Approve on your device", UserCode: userCode, Refresh: true, ReqID: p.ID})
}

func (s *Server) renderSignedIn(w http.ResponseWriter, a *approverRec) {
	s.page(w, http.StatusOK, messagePage, pageData{Title: "Signed in", Message: "You are signed in as " + a.Name +
		" and may approve MCP clients for " + strings.Join(a.Projects, ", ") + ". Go back to your MCP client and start (or retry) its sign-in."})
}

// localError is an error page on the hub itself: never a redirect.
func (s *Server) localError(w http.ResponseWriter, status int, msg string) {
	s.page(w, status, messagePage, pageData{Title: "Cannot continue", Message: msg, Error: true})
}

func (s *Server) page(w http.ResponseWriter, status int, t *template.Template, d pageData) {
	pageHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := t.Execute(w, d); err != nil {
		s.logs.Log(slog.LevelWarn, "render page", "err", err)
	}
}

// human writes a lifetime for people: whole days as "30 days", otherwise
// hours, minutes and seconds without the zero units ("1h30m", "10m",
// "20s"), to the second.
func human(d time.Duration) string {
	d = d.Round(time.Second)
	if d <= 0 {
		return "0s"
	}
	const day = 24 * time.Hour
	if d >= 2*day && d%day == 0 {
		return strconv.Itoa(int(d/day)) + " days"
	}
	var b strings.Builder
	for _, u := range []struct {
		unit   time.Duration
		suffix string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if n := d / u.unit; n > 0 {
			b.WriteString(strconv.Itoa(int(n)) + u.suffix)
			d -= n * u.unit
		}
	}
	return b.String()
}

// userCodeAlphabet has no 0/O, 1/I/L, or vowels that spell words.
const userCodeAlphabet = "BCDFGHJKMNPQRSTVWXZ23456789"

// newUserCode is 8 characters in two groups (~38 bits; it lives minutes
// and is only usable with a device token).
func newUserCode() string {
	var b [8]byte
	rand.Read(b[:])
	out := make([]byte, 0, 9)
	for i, c := range b {
		if i == 4 {
			out = append(out, '-')
		}
		out = append(out, userCodeAlphabet[int(c)%len(userCodeAlphabet)])
	}
	return string(out)
}

// normalizeUserCode accepts lower case, spaces and a missing dash.
func normalizeUserCode(s string) (string, bool) {
	var out []byte
	for _, r := range strings.ToUpper(s) {
		switch {
		case r == '-' || r == ' ':
		case strings.ContainsRune(userCodeAlphabet, r):
			out = append(out, byte(r))
		default:
			return "", false
		}
	}
	if len(out) != 8 {
		return "", false
	}
	return string(out[:4]) + "-" + string(out[4:]), true
}
