package hub

import (
	"context"
	"errors"
	"testing"
)

// TestClientTokenRevokeHoldsAtTheNextRequest: a client token verified on
// two nodes (each now knows which record the token names) is refused by
// both from the first request after the revoke returned, wherever it was
// revoked: what a node keeps is never the record.
func TestClientTokenRevokeHoldsAtTheNextRequest(t *testing.T) {
	url := startExternalNATS(t)
	a := startHub(t, Config{NATSURL: url, NodeName: "a"})
	b := startHub(t, Config{NATSURL: url, NodeName: "b"})
	ctx := context.Background()
	tok, err := a.CreateClientToken(ctx, "p1", "read", "t")
	if err != nil {
		t.Fatal(err)
	}
	other, err := a.CreateClientToken(ctx, "p1", "read", "other")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second from what the nodes remember
		for _, n := range []*testHub{a, b} {
			c, err := n.VerifyClientToken(ctx, tok.Token)
			if err != nil || c.TokenID != tok.ID || c.Project != "p1" {
				t.Fatalf("%s: verify before the revoke: %+v %v", n.cfg.NodeName, c, err)
			}
		}
	}
	if _, err := a.RevokeClientToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*testHub{b, a} {
		if c, err := n.VerifyClientToken(ctx, tok.Token); !errors.Is(err, ErrBadClientToken) {
			t.Errorf("%s: a revoked token verified: %+v %v", n.cfg.NodeName, c, err)
		}
		if c, err := n.VerifyClientToken(ctx, other.Token); err != nil || c.TokenID != other.ID {
			t.Errorf("%s: another token of the project: %+v %v", n.cfg.NodeName, c, err)
		}
	}
}
