package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"regexp"
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
