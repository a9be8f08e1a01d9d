package hubclient

import (
	"context"
	"net/http"

	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// AuditHead returns the audit anchor the hub keeps for the device that
// holds deviceToken: the furthest audit head it reported (Seq 0: none).
func (c *Client) AuditHead(ctx context.Context, deviceToken string) (*hubapi.DeviceAuditHead, error) {
	var out hubapi.DeviceAuditHead
	if err := c.do(ctx, http.MethodGet, "/v1/device/audit-head", deviceToken, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
