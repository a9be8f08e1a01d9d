package hub

import (
	"context"
	"errors"
	"testing"

	"github.com/roomrelay/roomrelay/relay/hubapi"
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

// TestEmbeddedHubRevokeHoldsAtTheNextRequest: a hub on its embedded NATS
// server keeps the client token records it verified (clientCache), and a
// revoke still holds from the first request after it returned, also for
// a verify that read the record before the revoke and finished after it.
func TestEmbeddedHubRevokeHoldsAtTheNextRequest(t *testing.T) {
	h := startHub(t, Config{})
	ctx := context.Background()
	tok, err := h.CreateClientToken(ctx, "p1", "read", "t")
	if err != nil {
		t.Fatal(err)
	}
	other, err := h.CreateClientToken(ctx, "p1", "write", "other")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second from what the hub keeps
		for _, tk := range []*hubapi.ClientToken{tok, other} {
			c, err := h.VerifyClientToken(ctx, tk.Token)
			if err != nil || c.TokenID != tk.ID || c.Project != "p1" || c.Scope != tk.Scope {
				t.Fatalf("verify %s before the revoke: %+v %v", tk.Name, c, err)
			}
		}
	}
	if _, ok := h.clientRec.get(tok.ID); !ok {
		t.Fatal("the embedded hub did not keep the verified record")
	}
	if _, err := h.RevokeClientToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if c, err := h.VerifyClientToken(ctx, tok.Token); !errors.Is(err, ErrBadClientToken) {
		t.Errorf("a revoked token verified: %+v %v", c, err)
	}
	if c, err := h.VerifyClientToken(ctx, other.Token); err != nil || c.TokenID != other.ID {
		t.Errorf("another token of the project: %+v %v", c, err)
	}

	// A verify reads the record, the revoke runs to its end, then the
	// verify would keep what it read: it must not.
	late, err := h.CreateClientToken(ctx, "p1", "read", "late")
	if err != nil {
		t.Fatal(err)
	}
	h.clientRec.afterRead = func() {
		h.clientRec.afterRead = nil
		if _, err := h.RevokeClientToken(ctx, late.ID); err != nil {
			t.Error(err)
		}
	}
	if c, err := h.VerifyClientToken(ctx, late.Token); err != nil || c.TokenID != late.ID {
		t.Fatalf("the verify that read before the revoke: %+v %v", c, err) // it read the record unrevoked
	}
	if c, err := h.VerifyClientToken(ctx, late.Token); !errors.Is(err, ErrBadClientToken) {
		t.Errorf("revoked while a verify was reading it, the token verified after the revoke: %+v %v", c, err)
	}
}
