// Package events is the one place local events are declared: every event
// type a desktop app reads on the local API's stream (GET
// /localapi/v1/events) and the Go type of each one's data. The daemon owns
// the one Publisher that the local API's routes, the room provider and the
// review gate publish through; agent/localapi's ring is what the stream
// reads.
//
// It is a leaf: it imports nothing of agent/* (relay's types are fine), so
// every package that publishes or reads an event can import it. The
// contract is agent/localapi/openapi.json: its Event schema's
// x-event-data maps each type to its data's component schema, and
// agent/localapi's TestEventsMatchTheContract checks that the two name the
// same types and that a sample of each payload validates.
//
// The events do not travel on the provider channel (docs/provider-protocol.md
// has notifications of its own), nor to the hub (relay's frames carry
// the hub's events).
package events

import (
	"encoding/json"
)

// Event types on the local API's stream. Clients must ignore types they
// do not know: new ones are added within v1.
const (
	TypeStatus           = "status"            // the agent's connection state changed
	TypePolicyChanged    = "policy_changed"    // the policy file was reloaded (API, CLI or a hand edit)
	TypeProposalCreated  = "proposal_created"  // a proposal waits for review
	TypeProposalDecided  = "proposal_decided"  // approved or declined, with decided_via when it went through the API
	TypeInstallChanged   = "install_changed"   // an approved app's delivery to the provider (pending, installed, failed)
	TypeBuildState       = "build_state"       // an approved snippet's smoke-run result
	TypeCommandRan       = "command_ran"       // a hub command's outcome, after its audit line; never arguments
	TypeProviderChanged  = "provider_changed"  // the room provider connected or went away
	TypeProviderSelected = "provider_selected" // the policy's room provider changed through the local API
	TypeSnapshot         = "snapshot"          // first line with initial=1, and after a resync
	TypeResync           = "resync"            // the stream cannot resume where asked: rebuild from the snapshot
	TypePing             = "ping"              // keepalive on an idle stream; no data
)

// Types lists every event type, for the contract test and documentation.
func Types() []string {
	return []string{TypeStatus, TypePolicyChanged, TypeProposalCreated, TypeProposalDecided, TypeInstallChanged,
		TypeBuildState, TypeCommandRan, TypeProviderChanged, TypeProviderSelected, TypeSnapshot, TypeResync, TypePing}
}

// Payload is an event's data; its type says which event it is, so an event
// type is never written beside its data.
type Payload interface {
	EventType() string
}

// Publisher is where events go: the daemon's one publisher (agent/localapi's
// ring, and daemon.Config.Events when set) and everything that publishes
// through it.
type Publisher interface {
	Publish(Payload)
}

// Tee publishes each event to every non-nil publisher in it, in order.
type Tee []Publisher

// Publish implements Publisher.
func (t Tee) Publish(p Payload) {
	for _, pub := range t {
		if pub != nil {
			pub.Publish(p)
		}
	}
}

// Data is p's data as the stream sends it: p marshalled to JSON, or nil
// for an event without data (ping), which the stream sends without a data
// field.
func Data(p Payload) (json.RawMessage, error) {
	if _, ok := p.(Ping); ok || p == nil {
		return nil, nil
	}
	return json.Marshal(p)
}
