package audit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Problem kinds Verify reports.
const (
	KindEdited      = "edited"       // a line's content does not match its hash, or its hash was recomputed
	KindRemoved     = "removed"      // lines are missing before this one
	KindReordered   = "reordered"    // the line is not where the chain puts it
	KindTruncated   = "truncated"    // the file ends in the middle of a line
	KindMissingTail = "missing_tail" // lines the head record counts are gone from the end
	KindMalformed   = "malformed"    // not a log line at all
	KindMissingFile = "missing_file" // a kept file is gone
	KindResumed     = "resumed"      // the log noted, when it was opened, that its tail had been changed
)

// Problem is one finding, named by file and 1-based line number (0 when it
// concerns a file as a whole).
type Problem struct {
	File   string `json:"file"`
	Line   int    `json:"line"`
	Seq    uint64 `json:"seq,omitempty"`
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

func (p Problem) String() string {
	if p.Line == 0 {
		return fmt.Sprintf("%s: %s: %s", p.File, p.Kind, p.Detail)
	}
	return fmt.Sprintf("%s line %d: %s: %s", p.File, p.Line, p.Kind, p.Detail)
}

// Report is the outcome of Verify.
type Report struct {
	Files      []string  `json:"files"` // oldest first
	Lines      int       `json:"lines"`
	FirstSeq   uint64    `json:"first_seq"`
	LastSeq    uint64    `json:"last_seq"`
	AnchorSeq  uint64    `json:"anchor_seq"` // lines up to this one were rotated away
	LastHash   string    `json:"last_hash"`
	LastTime   time.Time `json:"last_time,omitzero"`
	Problems   []Problem `json:"problems"`
	StaleFiles []string  `json:"stale_files,omitempty"` // files older than the anchor, left by a crash mid-rotation
}

// OK reports whether the log verified without problems. A log whose oldest
// lines were rotated away can be OK: see RotatedAway.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// RotatedAway is how many of the oldest lines (seq 1..n) rotation removed:
// the kept log verifies from there on, but that history is gone.
func (r Report) RotatedAway() uint64 { return r.AnchorSeq }

// line is one parsed line, in chain order.
type line struct {
	file   string
	n      int
	e      Entry
	ok     bool // parsed
	hashOK bool
}

// Verify checks the whole kept log in dir: each line against its own hash,
// each line's prev against the line before it (across files), the oldest
// kept file against the manifest's anchor, and the end against the head
// record. An error means the log could not be read; problems found are in
// the report.
func Verify(dir string) (Report, error) {
	var rep Report
	// The head first: a writer appending meanwhile can only move the files
	// ahead of it, never behind.
	head, headOK, err := readHead(dir)
	if err != nil {
		return rep, err
	}
	m, err := readManifest(dir)
	if err != nil {
		return rep, err
	}
	rep.AnchorSeq = m.AnchorSeq
	rot, err := rotatedFiles(dir)
	if err != nil {
		return rep, err
	}
	var names []string
	for _, r := range rot {
		if r.firstSeq <= m.AnchorSeq {
			rep.StaleFiles = append(rep.StaleFiles, r.name)
			continue
		}
		names = append(names, r.name)
	}
	if _, err := os.Stat(filepath.Join(dir, CurrentFile)); err == nil {
		names = append(names, CurrentFile)
	} else if !errors.Is(err, os.ErrNotExist) {
		return rep, fmt.Errorf("audit: %w", err)
	}
	rep.Files = names
	if m.AnchorSeq > 0 && (len(rot) == 0 || len(names) == 0 || firstSeqOf(rot, names[0]) != m.AnchorSeq+1) {
		// The file that starts right after the anchor is gone.
		rep.Problems = append(rep.Problems, Problem{File: rotatedName(m.AnchorSeq + 1), Kind: KindMissingFile,
			Detail: fmt.Sprintf("the oldest kept file (from seq %d) is missing", m.AnchorSeq+1)})
	}

	var lines []line
	for _, name := range names {
		raw, partial, err := readLines(filepath.Join(dir, name))
		if err != nil {
			return rep, err
		}
		for i, ln := range raw {
			e, hashOK, ok := parseLine(ln)
			lines = append(lines, line{file: name, n: i + 1, e: e, ok: ok, hashOK: hashOK})
		}
		if partial > 0 {
			rep.Problems = append(rep.Problems, Problem{File: name, Line: len(raw) + 1, Kind: KindTruncated,
				Detail: fmt.Sprintf("the file ends inside a line (%d bytes without a newline)", partial)})
		}
	}
	rep.Lines = len(lines)

	byHash := map[string]int{} // first line with each hash
	var maxSeq uint64
	for i, ln := range lines {
		if !ln.ok {
			continue
		}
		if _, dup := byHash[ln.e.Hash]; !dup {
			byHash[ln.e.Hash] = i
		}
		maxSeq = max(maxSeq, ln.e.Seq)
	}
	prevHash, prevSeq := m.AnchorHash, m.AnchorSeq
	prevAt := "the anchor in " + ManifestFile
	for i, ln := range lines {
		at := func(kind, format string, args ...any) {
			rep.Problems = append(rep.Problems, Problem{File: ln.file, Line: ln.n, Seq: ln.e.Seq, Kind: kind,
				Detail: fmt.Sprintf(format, args...)})
		}
		if !ln.ok {
			at(KindMalformed, "not an audit line (no valid JSON object ending in a hash)")
			// Resync on the next line's own claims.
			if i+1 < len(lines) && lines[i+1].ok {
				prevHash, prevSeq = lines[i+1].e.Prev, lines[i+1].e.Seq-1
			}
			prevAt = fmt.Sprintf("%s line %d", ln.file, ln.n)
			continue
		}
		if j := byHash[ln.e.Hash]; j < i {
			at(KindReordered, "it repeats %s line %d", lines[j].file, lines[j].n)
			continue
		}
		if rep.FirstSeq == 0 {
			rep.FirstSeq = ln.e.Seq
		}
		if !ln.hashOK {
			at(KindEdited, "the line's content does not match its hash")
		}
		if ln.e.Prev != prevHash {
			switch j, found := byHash[ln.e.Prev]; {
			case found && j != i-1:
				at(KindReordered, "it chains to %s line %d (seq %d), not to the line before it (%s)",
					lines[j].file, lines[j].n, lines[j].e.Seq, prevAt)
			case ln.e.Seq > prevSeq+1:
				if ln.e.Seq == prevSeq+2 {
					at(KindRemoved, "the line with seq %d, between %s and this line, is missing", prevSeq+1, prevAt)
				} else {
					at(KindRemoved, "the %d lines with seq %d to %d, between %s and this line, are missing",
						ln.e.Seq-prevSeq-1, prevSeq+1, ln.e.Seq-1, prevAt)
				}
			default:
				at(KindEdited, "its prev does not match the hash of %s: that line was changed and re-hashed", prevAt)
			}
		} else if ln.e.Seq != prevSeq+1 {
			at(KindEdited, "seq %d follows seq %d", ln.e.Seq, prevSeq)
		}
		if ln.e.Decision == Note {
			at(KindResumed, "%s", ln.e.Detail)
		}
		prevHash, prevSeq = ln.e.Hash, ln.e.Seq
		prevAt = fmt.Sprintf("%s line %d", ln.file, ln.n)
		rep.LastSeq, rep.LastHash, rep.LastTime = ln.e.Seq, ln.e.Hash, ln.e.Time
	}

	if headOK {
		lastFile, lastLine := CurrentFile, 0
		if len(lines) > 0 {
			lastFile, lastLine = lines[len(lines)-1].file, lines[len(lines)-1].n
		}
		_, found := byHash[head.hash]
		switch {
		case found || head.seq == 0:
			// The line the head names is there; where it stands, the
			// chain checks above have said.
		case head.seq > maxSeq:
			rep.Problems = append(rep.Problems, Problem{File: lastFile, Line: lastLine + 1, Seq: maxSeq + 1, Kind: KindMissingTail,
				Detail: fmt.Sprintf("the head record says the log ends at seq %d, but its last line is seq %d: %d line(s) removed from the end",
					head.seq, maxSeq, head.seq-maxSeq)})
		default:
			p := Problem{File: lastFile, Line: lastLine, Seq: head.seq, Kind: KindEdited,
				Detail: fmt.Sprintf("the line with seq %d is not the one the head record names: it was replaced", head.seq)}
			for _, ln := range lines {
				if ln.ok && ln.e.Seq == head.seq {
					p.File, p.Line = ln.file, ln.n
				}
			}
			rep.Problems = append(rep.Problems, p)
		}
	} else if rep.LastSeq > 1 {
		rep.Problems = append(rep.Problems, Problem{File: HeadFile, Kind: KindMissingTail,
			Detail: "the head record is missing or unreadable, so a removed last line cannot be ruled out"})
	}
	return rep, nil
}

func firstSeqOf(rot []rotated, name string) uint64 {
	for _, r := range rot {
		if r.name == name {
			return r.firstSeq
		}
	}
	return 0
}

// Verify checks the log; see the package-level Verify. It holds the log's
// lock so no append or rotation runs meanwhile.
func (l *Log) Verify() (Report, error) {
	// Grouped lines first become durable and counted by the head.
	l.mu.Lock()
	last := l.lastSeq
	l.mu.Unlock()
	if err := l.syncTo(last); err != nil {
		return Report{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return Verify(l.dir)
}
