package cli

import (
	"strings"
	"testing"
)

// TestHubTokenCreatePrintsTokenOnce: the rrc_ token is on stdout once and
// nowhere else; the "use it" hint on stderr (what logs and CI keep) names
// a placeholder.
func TestHubTokenCreatePrintsTokenOnce(t *testing.T) {
	t.Parallel()
	srv := startTestHub(t)
	code, out, errs := run(t, nil, "hub", "token", "create", "--project", "p1", "--scope", "read", "--name", "ci",
		"--hub", srv.URL(), "--admin-token", "rra_t")
	if code != ExitOK {
		t.Fatalf("hub token create: %d %s", code, errs)
	}
	tok := strings.TrimSpace(out)
	if !strings.HasPrefix(tok, "rrc_") || strings.Count(out, "rrc_") != 1 {
		t.Fatalf("stdout %q: want the token alone", out)
	}
	if strings.Contains(errs, tok) || strings.Contains(errs, "rrc_") {
		t.Errorf("stderr repeats the token: %q", errs)
	}
	if !strings.Contains(errs, `--header "Authorization: Bearer TOKEN"`) {
		t.Errorf("stderr %q: want the claude mcp add hint with a placeholder", errs)
	}
}
