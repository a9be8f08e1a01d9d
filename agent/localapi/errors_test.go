package localapi

import (
	"context"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
)

// codeStore fails GetProposal of "code-X" with relay code X.
type codeStore struct{ ProposalStore }

func (c codeStore) GetProposal(ctx context.Context, id string) (rooms.ProposalDetail, error) {
	if code, ok := strings.CutPrefix(id, "code-"); ok {
		return rooms.ProposalDetail{}, relay.Errorf(relay.Code(code), "the store says so")
	}
	return c.ProposalStore.GetProposal(ctx, id)
}

// TestEveryDeviceCodeOnTheLocalAPI: every code of relay's closed set that
// reaches the local API is answered with relay's status and retryability
// (the third surface of relay's code table beside the hub's API and the
// MCP front: relay/hub/mcpfront TestEveryDeviceCodeIsAToolError), and the
// API's own codes with theirs.
func TestEveryDeviceCodeOnTheLocalAPI(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, func(c *Config) { c.Proposals = codeStore{c.Proposals} })
	for _, c := range relay.Codes() {
		status, _, body := ta.raw("GET", Prefix+"proposals/code-"+string(c), nil, "")
		e, _ := body["error"].(map[string]any)
		if status != c.HTTPStatus() || errCode(body) != string(c) || e["retryable"] != c.Retryable() {
			t.Errorf("%s: %d %v; want %d, retryable %v", c, status, body, c.HTTPStatus(), c.Retryable())
		}
	}
	for code := range localCodes {
		e := apiErr(code, "m")
		if want, _ := codeStatus(code); e.Status != want || relay.Code(code).Valid() {
			t.Errorf("%s: status %d, want %d; a local code must not shadow relay's", code, e.Status, want)
		}
	}
}
