package cli

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/internal/testutil"
)

// TestReviewWebShowsTheSandboxCheck: `review --web` gives its page the
// sandbox check, wired as `snippet check --offline` is: with no React
// runtime, the page says so and how to get one, fetches nothing, and the
// proposal stays pending.
func TestReviewWebShowsTheSandboxCheck(t *testing.T) {
	home, timer, _ := reviewHome(t)
	cache := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb testutil.SyncBuffer
	e := &Env{Stdout: &out, Stderr: &errb, Executable: exe,
		// Without the worker subcommand (cli/hubcmd registers it) cli looks
		// for the separate worker binary; any executable does, since none
		// starts without a runtime.
		Getenv: func(k string) string {
			return map[string]string{"ROOMRELAY_HOME": home, "ROOMRELAY_SANDBOX_WORKER": exe}[k]
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- Main(ctx, []string{"review", "--web", "--cache-dir", cache}, e) }()

	urlRe := regexp.MustCompile(`http://127\.0\.0\.1:\d+/\?token=\S+`)
	var url string
	for deadline := time.Now().Add(10 * time.Second); url == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		url = urlRe.FindString(out.String())
	}
	if url == "" {
		t.Fatalf("no address printed: %q %q", out.String(), errb.String())
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	if resp, err := c.Get(url); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("open %s: %v", url, err)
	} else {
		resp.Body.Close()
	}
	base := url[:strings.Index(url, "/?")]
	resp, err := c.Get(base + "/p/" + timer.ID)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := "Not checked:</span> <span class=\"check-summary\">React runtime missing; run `roomrelay snippet fetch-runtime`</span>"
	if !strings.Contains(string(body), want) {
		t.Errorf("the page lacks %q:\n%s", want, body)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("the page fetched into the cache: %v", ents)
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Fatalf("review --web: exit %d: %s", code, errb.String())
	}
	code, outs, _ := run(t, map[string]string{"ROOMRELAY_HOME": home}, "review", "list")
	if code != ExitOK || !strings.Contains(outs, timer.ID) {
		t.Fatalf("the checked proposal is no longer pending:\n%s", outs)
	}
}

// TestReviewWebOpenKeepsTheTokenOffArgv: `review --web --open` once ran
// `xdg-open http://127.0.0.1:PORT/?token=…`, and /proc/PID/cmdline is
// world-readable: any local user could exchange the token first. The opener
// (a real child process here, a script on PATH recording what it got) now
// sees neither the token in its argv nor in its environment; it gets a 0600
// page in a 0700 directory whose redirect leads to the session, and the page
// is gone once the token was exchanged (#24 finding 8).
func TestReviewWebOpenKeepsTheTokenOffArgv(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the opener is xdg-open on Linux")
	}
	home, _, _ := reviewHome(t)
	bin := t.TempDir()
	rec := filepath.Join(t.TempDir(), "opener")
	script := "#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" > " + rec + ".argv\nenv > " + rec + ".env\n"
	if err := os.WriteFile(filepath.Join(bin, "xdg-open"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb testutil.SyncBuffer
	e := &Env{Stdout: &out, Stderr: &errb, Executable: exe,
		Getenv: func(k string) string { return map[string]string{"ROOMRELAY_HOME": home}[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- Main(ctx, []string{"review", "--web", "--open"}, e) }()
	testutil.Eventually(t, "the opener to run", func() bool {
		_, err := os.Stat(rec + ".env")
		return err == nil
	})
	token := regexp.MustCompile(`token=(\S+)`).FindStringSubmatch(out.String())
	if token == nil {
		t.Fatalf("no address printed: %q", out.String())
	}
	argv, _ := os.ReadFile(rec + ".argv")
	env, _ := os.ReadFile(rec + ".env")
	if strings.Contains(string(argv), token[1]) || strings.Contains(string(env), token[1]) {
		t.Fatalf("the opener's argv or environment holds the token:\n%s", argv)
	}
	args := strings.Split(strings.TrimSpace(string(argv)), "\n")
	if len(args) != 2 || !strings.HasPrefix(args[1], "file:///") {
		t.Fatalf("opener argv %q, want one file:// address", args)
	}
	page := strings.TrimPrefix(args[1], "file://")
	for p, want := range map[string]os.FileMode{page: 0o600, filepath.Dir(page): 0o700 | os.ModeDir} {
		if st, err := os.Stat(p); err != nil || st.Mode() != want {
			t.Fatalf("%s: %v %v, want mode %v", p, st.Mode(), err, want)
		}
	}
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`url=([^"]+)"`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no redirect in the launch page:\n%s", b)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := c.Get(html.UnescapeString(string(m[1])))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("follow the launch page: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := os.Stat(filepath.Dir(page)); !os.IsNotExist(err) {
		t.Errorf("the launch page outlived the session's start: %v", err)
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Fatalf("review --web --open: exit %d: %s", code, errb.String())
	}
}
