package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestOAuthLoopbackHubNoFlags: "claude mcp add URL, then claude mcp login,
// ends Connected" against the README's two-terminal hub: `roomrelay hub
// --listen 127.0.0.1:PORT` with no other flag (no --public-url: a loopback
// hub is its own issuer). The official TS SDK's OAuth client provider
// (e2e/mcpjs/oauth.mjs without a login link) meets the 401, discovers,
// registers http://localhost:PORT/callback as Claude Code does, opens the
// consent page, whose device code the laptop's owner approves with the
// real CLI, follows the page to the callback (code, state, iss), exchanges
// the code and ends with tool calls: list_local_rooms and read_room
// reaching the device.
func TestOAuthLoopbackHubNoFlags(t *testing.T) {
	w := startOAuthWorldWith(t, func(string) []string { return nil })
	dir := needNode(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), nodeScriptTimeout)
	defer cancel()
	c := nodeCommand(ctx, dir, []string{"ROOMRELAY_MCP_URL=" + w.hubURL + "/mcp", "ROOMRELAY_PROJECT=proj-a"}, "node", "oauth.mjs")
	var errb bytes.Buffer
	c.Stderr = &errb
	stdin, _ := c.StdinPipe()
	stdout, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var out strings.Builder
	steps := map[string]string{}
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		var rec struct{ Step, Code string }
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		steps[rec.Step] = line
		if rec.Step == "device_code" {
			if code, text := w.run(w.devHome, "oauth", "approve", rec.Code, "--yes"); code != 0 {
				t.Errorf("roomrelay oauth approve %s: exit %d %s", rec.Code, code, text)
			}
			io.WriteString(stdin, "approved\n")
		}
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("node oauth.mjs: %v\nstderr:\n%s\nstdout:\n%s", err, errb.String(), out.String())
	}
	for _, s := range []string{"device_code", "authorized", "read_room", "done"} {
		if steps[s] == "" {
			t.Fatalf("oauth.mjs ended without step %q:\n%s\n%s", s, out.String(), errb.String())
		}
	}
	t.Logf("TS SDK sign-in on a hub started with no flags: %s", steps["authorized"])
	var grants struct {
		Grants []struct {
			ApprovedVia string `json:"approved_via"`
			Device      string `json:"device"`
		} `json:"grants"`
	}
	w.admin(&grants, "hub", "oauth", "grants", "--json")
	if len(grants.Grants) != 1 || grants.Grants[0].ApprovedVia != "device" {
		t.Errorf("grants after the sign-in: %+v", grants)
	}
}
