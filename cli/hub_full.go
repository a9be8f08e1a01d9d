//go:build !agentonly

package cli

// buildFlavor is reported by `roomrelay version`: "full" has the hub and the
// demo, "agent" (-tags agentonly, see hub_agentonly.go) does not.
const buildFlavor = "full"
