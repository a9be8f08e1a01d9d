package audit

import "fmt"

// Head is a position in the chain: the last durable line's seq and hash,
// as the head record holds it.
type Head struct {
	Seq  uint64
	Hash string
}

// ReadHead returns the head record of the log in dir; false if there is
// none (no line written yet, or the log is gone).
func ReadHead(dir string) (Head, bool, error) {
	h, ok, err := readHead(dir)
	return Head{Seq: h.seq, Hash: h.hash}, ok, err
}

// CompareAnchor checks the log in dir against an anchor kept off the device
// (the hub's copy of the furthest head the agent reported). It returns ""
// when the log reaches the anchor with the same hash there, or when the
// anchor's line was rotated away (nothing left to compare), and otherwise
// names the gap: the log is missing, shorter than the anchor, or forked
// (another line at the anchor's seq). An error means the log could not be
// read.
func CompareAnchor(dir string, anchor Head) (string, error) {
	if anchor.Seq == 0 {
		return "", nil
	}
	rep, err := Verify(dir)
	if err != nil {
		return "", err
	}
	short := anchor.Hash
	if len(short) > 12 {
		short = short[:12]
	}
	switch {
	case rep.Lines == 0:
		return fmt.Sprintf("the audit log is missing: the hub's anchor says it reached seq %d (hash %s…); lines 1–%d were deleted with it", anchor.Seq, short, anchor.Seq), nil
	case rep.LastSeq < anchor.Seq:
		return fmt.Sprintf("the audit log is shorter than its anchor: it ends at seq %d, the hub's anchor is seq %d (hash %s…); lines %d–%d were removed", rep.LastSeq, anchor.Seq, short, rep.LastSeq+1, anchor.Seq), nil
	case anchor.Seq <= rep.AnchorSeq:
		return "", nil // rotated away: the kept log starts after it
	}
	entries, err := Query(dir, Filter{})
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Seq == anchor.Seq {
			if e.Hash != anchor.Hash {
				return fmt.Sprintf("the audit log forked from its anchor: its line seq %d has hash %.12s…, the hub's anchor %s… (the history was rewritten)", anchor.Seq, e.Hash, short), nil
			}
			return "", nil
		}
	}
	return fmt.Sprintf("the audit log has no line seq %d, which the hub's anchor names (hash %s…)", anchor.Seq, short), nil
}
