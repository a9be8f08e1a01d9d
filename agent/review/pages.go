package review

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
)

// The pages: the pending list, one proposal, the decisions.

type listPage struct {
	Proposals []rooms.Proposal
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request, _ string) {
	ps, err := h.store.ListProposals(r.Context(), rooms.ProposalFilter{State: rooms.ProposalPending})
	if err != nil {
		h.log.Error("review: list proposals", "err", err)
		h.fail(w, http.StatusInternalServerError, "Error", "The local store could not be read.")
		return
	}
	h.render(w, http.StatusOK, "list.html", listPage{Proposals: ps})
}

type fileView struct {
	ID     string // anchor prefix of its lines: "f1" → #f1-L12
	Path   string
	Bytes  int
	Lines  int
	Code   code
	Hidden Hidden
}

// hiddenFile names a file with hidden characters in the banner.
type hiddenFile struct {
	ID, Path, What string
}

type proposalPage struct {
	P          rooms.Proposal
	Name       string // the name, hidden characters marked
	ProposedBy string
	Arrived    string
	Files      []fileView
	Hidden     []hiddenFile // non-empty: the banner above the files
	Check      *checkView   // a pending snippet's sandbox check
	CSRF       string
	Texts      map[string]string
}

var texts = map[string]string{"Approval": TextApproval, "Approve": TextApprove, "Decline": TextDecline,
	"Repo": TextRepo, "RepoNote": TextRepoNote, "HiddenWarning": HiddenWarning}

// TimeFormat is how the page and `roomrelay review` show a time.
const TimeFormat = "2006-01-02 15:04:05 UTC"

// ProposedBy is the proposer as the owner reads it; older agents did not
// record one.
func ProposedBy(p rooms.Proposal) string {
	if p.ProposedBy == "" {
		return "not recorded (proposed before this device recorded callers)"
	}
	return Printable(p.ProposedBy)
}

func (h *Handler) show(w http.ResponseWriter, r *http.Request, csrf string) {
	d, err := h.store.GetProposal(r.Context(), r.PathValue("id"))
	if err != nil {
		h.storeError(w, err)
		return
	}
	pg := proposalPage{P: d.Proposal, Name: Printable(d.Name), ProposedBy: ProposedBy(d.Proposal),
		Arrived: d.CreatedAt.UTC().Format(TimeFormat), CSRF: csrf, Texts: texts}
	deadline := time.Now().Add(highlightBudget)
	for i, p := range d.SortedPaths() {
		c := d.Files[p]
		fv := fileView{ID: "f" + strconv.Itoa(i+1), Path: p, Bytes: len(c), Lines: LineCount(c), Hidden: ScanHidden(c)}
		fv.Code = renderCode(fv.ID, p, c, deadline)
		if fv.Hidden.Any() {
			pg.Hidden = append(pg.Hidden, hiddenFile{ID: fv.ID, Path: Printable(p), What: fv.Hidden.String()})
		}
		pg.Files = append(pg.Files, fv)
	}
	if hn := ScanHidden(d.Name); hn.Any() {
		pg.Hidden = append([]hiddenFile{{Path: "the proposal's name", What: hn.String()}}, pg.Hidden...)
	}
	// Only a pending snippet is checked: a decided one is the agent's
	// business (it smoke-runs what was approved), and a repository
	// proposal has no files here.
	if d.State == rooms.ProposalPending && d.Kind == rooms.SourceSnippet {
		v := h.check(r.Context(), d.ContentHash, d.Files)
		pg.Check = &v
	}
	h.render(w, http.StatusOK, "proposal.html", pg)
}

func (h *Handler) decide(approve bool) func(w http.ResponseWriter, r *http.Request, csrf string) {
	return func(w http.ResponseWriter, r *http.Request, _ string) {
		id := r.PathValue("id")
		var p rooms.Proposal
		var err error
		if approve {
			// Only the hash the owner was shown is approved.
			p, err = h.store.ApproveProposal(r.Context(), id, r.PostForm.Get("hash"))
		} else {
			p, err = h.store.DeclineProposal(r.Context(), id)
		}
		if err != nil {
			h.storeError(w, err)
			return
		}
		if approve {
			h.log.Info("review: approved on the review page", "proposal", id, "instance_id", p.InstanceID)
			h.render(w, http.StatusOK, "message.html", messagePage{Title: "Approved",
				Message: fmt.Sprintf("%q is now in the Room app launcher of room %s (app %s). The agent tells the hub within a second or so.", p.Name, p.RoomID, p.InstanceID),
				Link:    "/", LinkText: "Pending proposals"})
			return
		}
		h.log.Info("review: declined on the review page", "proposal", id)
		h.render(w, http.StatusOK, "message.html", messagePage{Title: "Declined",
			Message: fmt.Sprintf("%q was declined and its files discarded. Its idempotency key stays spent.", p.Name),
			Link:    "/", LinkText: "Pending proposals"})
	}
}

func (h *Handler) storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, rooms.ErrContentChanged):
		h.fail(w, http.StatusConflict, "Not approved: the content changed",
			"The proposal's content is not what this page showed, so nothing was approved. Open the proposal again and review what it holds now.")
	case errors.Is(err, rooms.ErrNotPending):
		h.fail(w, http.StatusConflict, "Already decided", "This proposal was already approved or declined (perhaps in another window or with `roomrelay review`).")
	case isNotFound(err):
		h.fail(w, http.StatusNotFound, "No such proposal", "There is no proposal with that id on this device.")
	default:
		h.log.Error("review: store", "err", err)
		h.fail(w, http.StatusInternalServerError, "Error", "The local store failed: "+err.Error())
	}
}

func isNotFound(err error) bool {
	var re *relay.Error
	return errors.As(err, &re) && re.Code == relay.CodeNotFound
}
