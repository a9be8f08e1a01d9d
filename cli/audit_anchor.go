package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
)

// errNoAnchor: the device is not enrolled, so there is no hub to hold an
// audit anchor; the local check is all there is.
var errNoAnchor = errors.New("not enrolled: no hub holds an audit anchor")

// hubAnchor asks the hub for the audit anchor it keeps for this device
// (the furthest head the agent reported), with the device token.
func hubAnchor(ctx context.Context, p device.Paths, cfg *device.Config, token string) (audit.Head, error) {
	if cfg == nil {
		c, err := device.LoadConfig(p)
		if err != nil {
			return audit.Head{}, errNoAnchor
		}
		cfg = c
	}
	if token == "" {
		cs, err := credstore.Open(ctx, cfg.CredentialStore, p.Config)
		if err != nil {
			return audit.Head{}, fmt.Errorf("credential store: %w", err)
		}
		if token, err = cs.Get(ctx, cfg.DeviceID); err != nil {
			return audit.Head{}, fmt.Errorf("device token: %w", err)
		}
	}
	hc, err := hubHTTPClient(cfg.CAFile)
	if err != nil {
		return audit.Head{}, err
	}
	cl := hubclient.New(cfg.Hub, "")
	cl.HTTP = hc
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	h, err := cl.AuditHead(ctx, token)
	if err != nil {
		return audit.Head{}, fmt.Errorf("ask the hub for the audit anchor: %w", err)
	}
	return audit.Head{Seq: h.Seq, Hash: h.Hash}, nil
}

// anchorGap compares the local audit log with the hub's anchor: the gap
// named ("" if none), or why the comparison could not be made.
func anchorGap(ctx context.Context, p device.Paths, cfg *device.Config, token string) (gap string, anchor audit.Head, err error) {
	anchor, err = hubAnchor(ctx, p, cfg, token)
	if err != nil {
		return "", anchor, err
	}
	gap, err = audit.CompareAnchor(filepath.Join(p.State, daemon.AuditDir), anchor)
	return gap, anchor, err
}
