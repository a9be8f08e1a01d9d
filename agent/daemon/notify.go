package daemon

import (
	"context"

	"github.com/roomrelay/roomrelay/agent/notify"
	"github.com/roomrelay/roomrelay/agent/rooms"
)

// notifyProposal queues a desktop notification for a proposal just created,
// unless the policy in force says "notify off". It never blocks the
// command: the queue's goroutine (owned by Run) talks to the desktop.
func (d *Daemon) notifyProposal(ctx context.Context, p rooms.Proposal) {
	if d.appNotifies() {
		d.log.Debug("no desktop notification: the desktop app shows proposals itself", "proposal", p.ID)
		return
	}
	if !d.policy.Load().Notifications() {
		d.log.Debug("no desktop notification: the policy says notify off", "proposal", p.ID)
		return
	}
	// The owner knows the room by its name; the id stands in if the room
	// cannot be read (its name is cleaned by notify like the app's).
	room := p.RoomID
	if name := d.roomName(ctx, p.Project, p.RoomID); name != "" {
		room = name
	}
	d.notes.Post(notify.Note{ProposalID: p.ID, Project: p.Project, Room: room, App: p.Name, From: p.ProposedBy})
}
