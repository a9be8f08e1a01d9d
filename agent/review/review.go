// Package review is the device owner's review page for proposals: a small
// HTTP handler served on 127.0.0.1 only, by `roomrelay review --web`. It lists
// pending proposals, shows every proposed file in full as escaped text
// (numbered, highlighted on the server, hidden characters marked and named
// in a banner) with who proposed it, when, and a sandbox check of it, and
// approves (bound to the content hash shown) or declines them in the local
// store. The running agent announces the decision to the hub.
//
// The page is reachable by any local process and by any web page the owner
// visits (through the browser), so it trusts neither: a one-time token in the
// printed URL is exchanged for a session cookie, the Host header must be the
// loopback address it listens on (DNS rebinding), state changes only by POST
// with a per-session CSRF token and a same-origin Origin / Sec-Fetch-Site,
// and a strict Content-Security-Policy allows no script at all.
package review

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/roomrelay/roomrelay/agent/rooms"
)

// Texts of the review card, from the seed.
const (
	TextApproval = "Approval makes this code available in the Room app launcher. Review the files before approving."
	TextApprove  = "Approve and create"
	TextDecline  = "Decline"
	TextRepo     = "Review repository code before approving"
	TextRepoNote = "This path does not build or deploy a bundle."
)

// CSP is the Content-Security-Policy of every response: no script, no
// frames, styles only from this origin, forms post only to this origin.
const CSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

const maxForm = 4 << 10

//go:embed templates/*.html static/review.css
var assets embed.FS

// pages are parsed on first use, not at init: this package is linked into
// every roomrelay process, and only `review serve` renders a page.
var pages = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("").Funcs(template.FuncMap{
		"plural":    plural,
		"printable": Printable,
		"time":      func(t time.Time) string { return t.UTC().Format(TimeFormat) },
	}).ParseFS(assets, "templates/*.html"))
})

// Store is what the page needs of the local store (a *rooms.Store).
type Store interface {
	ListProposals(ctx context.Context, f rooms.ProposalFilter) ([]rooms.Proposal, error)
	GetProposal(ctx context.Context, id string) (rooms.ProposalDetail, error)
	ApproveProposal(ctx context.Context, id, contentHash string) (rooms.Proposal, error)
	DeclineProposal(ctx context.Context, id string) (rooms.Proposal, error)
}

// Handler serves the review page for one owner session.
type Handler struct {
	store  Store
	host   string // "127.0.0.1:port": the only Host and Origin accepted
	cookie string // the session cookie's name, per port: cookies ignore ports
	log    *slog.Logger
	mux    *http.ServeMux

	checker      Checker // nil: the page says the proposal was not checked
	checkTimeout time.Duration
	onSession    func() // WithSessionStarted
	checks       checkCache

	mu      sync.Mutex
	token   string // the one-time URL token; "" once exchanged
	session string // the session cookie's value; "" until the token is used
	csrf    string
}

// NewHandler returns the handler for a server reachable at host
// ("127.0.0.1:port"). Token is the one-time token for the URL.
func NewHandler(store Store, host string, log *slog.Logger, opts ...Option) (*Handler, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tok, err := randomToken()
	if err != nil {
		return nil, err
	}
	h := &Handler{store: store, host: host, log: log, token: tok,
		cookie: "rr_review_" + strings.NewReplacer(".", "_", ":", "_").Replace(host), checkTimeout: DefaultCheckTimeout}
	for _, o := range opts {
		o(h)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.withSession(h.list))
	mux.HandleFunc("GET /p/{id}", h.withSession(h.show))
	mux.HandleFunc("POST /p/{id}/approve", h.withSession(h.decide(true)))
	mux.HandleFunc("POST /p/{id}/decline", h.withSession(h.decide(false)))
	mux.HandleFunc("GET /static/review.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		http.ServeFileFS(w, r, assets, "static/review.css")
	})
	mux.HandleFunc("GET /static/highlight.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		_, _ = w.Write(highlightCSS())
	})
	h.mux = mux
	return h, nil
}

// URL is the address to open: it carries the one-time token.
func (h *Handler) URL() string { return "http://" + h.host + "/?token=" + h.token }

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("review: random token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func eq(a, b string) bool { return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// ServeHTTP sets the security headers and refuses foreign Host headers
// before any route runs.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	// Not "no-referrer": under it Chromium sends "Origin: null" on the
	// page's own form posts, which the Origin check must refuse. The token
	// is gone from the URL after the first redirect anyway.
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	// A page on another site that rebinds its name to 127.0.0.1 still sends
	// its own name as Host.
	if r.Host != h.host {
		h.fail(w, http.StatusMisdirectedRequest, "Wrong address", "This page answers only at http://"+h.host+"/.")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// withSession admits the owner: the first request with the URL's token gets
// the session cookie (and is redirected to drop the token from the address
// bar); later requests need the cookie. POSTs also need the CSRF token and a
// same-origin browser context.
func (h *Handler) withSession(next func(w http.ResponseWriter, r *http.Request, csrf string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		session, csrf, token := h.session, h.csrf, h.token
		h.mu.Unlock()
		if c, err := r.Cookie(h.cookie); err == nil && eq(c.Value, session) {
			if r.Method == http.MethodPost && !h.sameOrigin(w, r, csrf) {
				return
			}
			next(w, r, csrf)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/" && eq(r.URL.Query().Get("token"), token) {
			if err := h.startSession(w); err != nil {
				h.log.Error("review: start session", "err", err)
				h.fail(w, http.StatusInternalServerError, "Error", "Could not start a session.")
				return
			}
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		h.fail(w, http.StatusForbidden, "Not signed in",
			"Open the address that `roomrelay review --web` printed; its one-time token starts the session. A used token does not work twice: restart the command for a new one.")
	}
}

func (h *Handler) startSession(w http.ResponseWriter) error {
	s, err := randomToken()
	if err != nil {
		return err
	}
	c, err := randomToken()
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.token == "" {
		return errors.New("the token was used concurrently")
	}
	h.token, h.session, h.csrf = "", s, c
	http.SetCookie(w, &http.Cookie{Name: h.cookie, Value: s, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	if h.onSession != nil {
		h.onSession()
	}
	return nil
}

// sameOrigin checks a state-changing request: CSRF field, Origin and
// Sec-Fetch-Site (browsers send both on a form POST; other clients need the
// CSRF token, which only the page holds).
func (h *Handler) sameOrigin(w http.ResponseWriter, r *http.Request, csrf string) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		h.fail(w, http.StatusBadRequest, "Bad request", "The form could not be read.")
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+h.host {
		h.fail(w, http.StatusForbidden, "Refused", "The request came from another site (Origin "+o+"). Nothing was changed.")
		return false
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		h.fail(w, http.StatusForbidden, "Refused", "The request did not come from this page (Sec-Fetch-Site "+s+"). Nothing was changed.")
		return false
	}
	if !eq(r.PostForm.Get("csrf"), csrf) {
		h.fail(w, http.StatusForbidden, "Refused", "The form's CSRF token is missing or wrong: reload the proposal and use its buttons. Nothing was changed.")
		return false
	}
	return true
}

type messagePage struct {
	Title, Message string
	Link, LinkText string
}

func (h *Handler) fail(w http.ResponseWriter, status int, title, msg string) {
	h.render(w, status, "message.html", messagePage{Title: title, Message: msg, Link: "/", LinkText: "Pending proposals"})
}

func (h *Handler) render(w http.ResponseWriter, status int, name string, data any) {
	var b strings.Builder
	if err := pages().ExecuteTemplate(&b, name, data); err != nil {
		h.log.Error("review: render", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}
