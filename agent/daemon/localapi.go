package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/provider"
	"github.com/roomrelay/roomrelay/agent/review"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
)

// apiDecisions remembers the proposals the local API decided (it published
// their proposal_decided event itself, with decided_via), so the decision
// publisher does not publish them a second time.
type apiDecisions struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (a *apiDecisions) add(id string) {
	a.mu.Lock()
	if a.ids == nil {
		a.ids = map[string]bool{}
	}
	a.ids[id] = true
	a.mu.Unlock()
}

// remove forgets id (the API did not decide it after all).
func (a *apiDecisions) remove(id string) {
	a.mu.Lock()
	delete(a.ids, id)
	a.mu.Unlock()
}

// take reports whether the API decided id, and forgets it.
func (a *apiDecisions) take(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	ok := a.ids[id]
	delete(a.ids, id)
	return ok
}

// openLocalAPI listens on the local API's endpoint: a failure (the name is
// taken, the runtime dir is not the user's) refuses to start the agent.
func (d *Daemon) openLocalAPI() error {
	lc := localapi.Config{
		Listen:          localapi.ListenConfig{RuntimeDir: d.cfg.RuntimeDir, StateDir: d.cfg.StateDir, ShortDir: d.cfg.SocketShortDir},
		ConfigDir:       d.cfg.ConfigDir,
		PolicyPath:      d.policyPath(),
		Version:         d.cfg.Version,
		Enrolled:        d.cfg.Enrolled,
		Events:          d.events,
		Status:          d.agent.Status,
		Provider:        d.cfg.Provider,
		ProviderHandler: d.cfg.ProviderHandler,
		OAuth:           d.cfg.OAuth,
		Proposals:       d.store,
		Audit:           d.audit,
		Deciding: func(id string) func(bool) {
			d.apiDecided.add(id)
			return func(decided bool) {
				if !decided {
					d.apiDecided.remove(id)
				}
			}
		},
		Decided: func(ctx context.Context, p rooms.Proposal, via string) {
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
	d.events.Publish(localapi.EventStatus, st)
}

// CommandRan is the data of a command_ran event: never arguments.
type CommandRan struct {
	Command    string `json:"command"`
	Project    string `json:"project"`
	Room       string `json:"room,omitempty"`
	Outcome    string `json:"outcome"` // ok, or the error code
	Denied     bool   `json:"denied"`
	DurationMS int64  `json:"duration_ms"`
	Caller     string `json:"caller,omitempty"`
}

// publishCommand sends command_ran after the audit line was appended.
func (d *Daemon) publishCommand(cmd *relay.Command, e audit.Entry) {
	out := "ok"
	if e.ErrorCode != "" {
		out = e.ErrorCode
	}
	d.events.Publish(localapi.EventCommandRan, CommandRan{Command: e.Command, Project: e.Project, Room: e.Room,
		Outcome: out, Denied: e.Decision == audit.Denied, DurationMS: e.DurationMS, Caller: caller(cmd)})
}

// ProposalCreated is the data of a proposal_created event.
type ProposalCreated struct {
	ProposalID  string    `json:"proposal_id"`
	Project     string    `json:"project"`
	RoomID      string    `json:"room_id"`
	Kind        string    `json:"kind"`
	Name        string    `json:"name"`
	ContentHash string    `json:"content_hash"`
	FileCount   int       `json:"file_count"`
	TotalBytes  int64     `json:"total_bytes"`
	ProposedBy  string    `json:"proposed_by,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

func (d *Daemon) publishProposal(p rooms.Proposal) {
	d.events.Publish(localapi.EventProposalCreated, ProposalCreated{ProposalID: p.ID, Project: p.Project, RoomID: p.RoomID,
		Kind: string(p.Kind), Name: p.Name, ContentHash: p.ContentHash, FileCount: p.FileCount, TotalBytes: p.TotalBytes,
		ProposedBy: p.ProposedBy, CreatedAt: p.CreatedAt})
}

// publishDecided sends proposal_decided for a decision made outside the
// local API (the review page, or the CLI on the store): decided_via is not
// known then and is left out.
func (d *Daemon) publishDecided(p rooms.Proposal) {
	if d.apiDecided.take(p.ID) {
		return
	}
	d.events.Publish(localapi.EventProposalDecided, localapi.ProposalDecidedData{ProposalID: p.ID, Project: p.Project,
		RoomID: p.RoomID, State: p.State, ContentHash: p.ContentHash, InstanceID: p.InstanceID, InstallState: p.InstallState})
}

// Events is the local API's event ring: the room provider publishes into
// it too.
func (d *Daemon) Events() *localapi.Events { return d.events }

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

// teeEvents publishes into the local API's ring and Config.Events.
type teeEvents []provider.Events

func (t teeEvents) Publish(typ string, data any) {
	for _, e := range t {
		e.Publish(typ, data)
	}
}
