package daemon

import (
	"context"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/review"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
)

// openLocalAPI listens on the local API's endpoint: a failure (the name is
// taken, the runtime dir is not the user's) refuses to start the agent.
func (d *Daemon) openLocalAPI() error {
	lc := localapi.Config{
		Listen:          localapi.ListenConfig{RuntimeDir: d.cfg.RuntimeDir, StateDir: d.cfg.StateDir, ShortDir: d.cfg.SocketShortDir},
		ConfigDir:       d.cfg.ConfigDir,
		PolicyPath:      d.policyPath(),
		Version:         d.cfg.Version,
		Enrolled:        d.cfg.Enrolled,
		Events:          d.ring,
		Publisher:       d.pub,
		Status:          d.agent.Status,
		Provider:        d.cfg.Provider,
		ProviderHandler: d.cfg.ProviderHandler,
		OAuth:           d.cfg.OAuth,
		Proposals:       d.store,
		Audit:           d.audit,
		Decided: func(ctx context.Context, p rooms.Proposal) {
			d.Poke(ctx) // tell the hub now, not at the next change event
		},
		PolicySaved: func(ctx context.Context) { d.Poke(ctx) },
		Logger:      d.log,
	}
	if lc.Provider == nil {
		lc.Provider = providerStater{d}
	}
	if lc.ProviderHandler == nil && d.prov != nil {
		lc.ProviderHandler = d.prov
	}
	if d.cfg.Sandbox != nil {
		lc.Checker = review.SandboxChecker(d.cfg.Sandbox)
	}
	srv, err := localapi.Open(lc)
	if err != nil {
		return err
	}
	d.api = srv
	return nil
}

// publishStatus is the agent's OnStatus: a status event per state change.
func (d *Daemon) publishStatus(st agent.Status) {
	d.pub.Publish(events.StatusChanged{Status: st})
}

// publishCommand sends command_ran after the audit line was appended.
func (d *Daemon) publishCommand(cmd *relay.Command, e audit.Entry) {
	out := "ok"
	if e.ErrorCode != "" {
		out = e.ErrorCode
	}
	d.pub.Publish(events.CommandRan{Command: e.Command, Project: e.Project, Room: e.Room,
		Outcome: out, Denied: e.Decision == audit.Denied, DurationMS: e.DurationMS, Caller: caller(cmd)})
}

func (d *Daemon) publishProposal(p rooms.Proposal) {
	d.pub.Publish(events.ProposalCreated{ProposalID: p.ID, Project: p.Project, RoomID: p.RoomID,
		Kind: string(p.Kind), Name: p.Name, ContentHash: p.ContentHash, FileCount: p.FileCount, TotalBytes: p.TotalBytes,
		ProposedBy: p.ProposedBy, CreatedAt: p.CreatedAt})
}

// publishDecided sends proposal_decided for a decision made outside the
// local API: on the review page, or by the CLI on the store (decided_via is
// empty then, and left out). A decision through the local API carries its
// decided_via, and the API published it, with that, when it decided.
func (d *Daemon) publishDecided(p rooms.Proposal) {
	if p.DecidedVia != "" {
		return
	}
	d.pub.Publish(events.ProposalDecided{ProposalID: p.ID, Project: p.Project,
		RoomID: p.RoomID, State: p.State, ContentHash: p.ContentHash, InstanceID: p.InstanceID, InstallState: p.InstallState})
}

// Events is the local API's event ring, which the daemon's publisher
// writes into.
func (d *Daemon) Events() *localapi.Events { return d.ring }

// LocalAPI is the local API server (nil when Config.NoLocalAPI).
func (d *Daemon) LocalAPI() *localapi.Server { return d.api }

// providerStater is the provider's state for the local API's status.
type providerStater struct{ d *Daemon }

func (p providerStater) ProviderState() localapi.ProviderState {
	sel := p.d.policy.Load().Provider()
	if p.d.prov == nil {
		return localapi.ProviderState{Selected: sel}
	}
	c, ok := p.d.prov.Current()
	if !ok {
		return localapi.ProviderState{Selected: sel}
	}
	return localapi.ProviderState{Selected: sel, Connected: true, App: c.App.Name, Version: c.App.Version,
		PID: c.Peer.PID, Exe: c.Peer.Exe, Since: c.Since}
}
