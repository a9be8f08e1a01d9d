package sandbox

import (
	"fmt"
	"time"
)

// This file is what the parent (Pool) and the worker (sandbox/worker's
// Main) share. The worker side links esbuild and goja and is its own
// package, so a binary that does not import it (the device binary,
// cmd/roomrelay-agent) carries no JavaScript engine; its worker is the
// separate binary cmd/roomrelay-sandbox.

// WorkerRequest, WorkerInit and WorkerResponse are the worker protocol,
// exported for sandbox/worker only: one JSON object per line on the worker's
// stdin and stdout. The parent sends an init message first (the verified library
// sources and the limits), the worker answers ready, then each request gets
// exactly one response.
type WorkerRequest struct {
	Init  *WorkerInit       `json:"init,omitempty"`
	ID    uint64            `json:"id,omitempty"`
	Files map[string]string `json:"files,omitempty"`
}

type WorkerInit struct {
	Libraries        map[string]string `json:"libraries"`
	TimeoutMS        int64             `json:"timeout_ms"`
	KillGraceMS      int64             `json:"kill_grace_ms"`
	MemoryLimitBytes int64             `json:"memory_limit_bytes"`
}

type WorkerResponse struct {
	ID    uint64 `json:"id,omitempty"`
	Ready bool   `json:"ready,omitempty"`
	// Limits says which limits apply in this worker.
	Limits string `json:"limits,omitempty"`
	// DataLimited: the worker's mappings are capped (RLIMIT_DATA), so a
	// fault inside the Go runtime is the cap reached (see runtimeFault).
	DataLimited bool    `json:"data_limited,omitempty"`
	Error       string  `json:"error,omitempty"`
	Result      *Result `json:"result,omitempty"`
	// Recycle asks the parent to retire this worker (a limit was hit, so
	// its heap may be large).
	Recycle  bool  `json:"recycle,omitempty"`
	RSSBytes int64 `json:"rss_bytes,omitempty"`
}

// Message is a build diagnostic. Line and Column are 1-based; File is a
// snippet path such as "src/App.tsx", empty when esbuild gave no location.
type Message struct {
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
	Text     string `json:"message"`
	LineText string `json:"line_text,omitempty"`
}

func (m Message) String() string {
	if m.File == "" {
		return m.Text
	}
	return fmt.Sprintf("%s:%d:%d: %s", m.File, m.Line, m.Column, m.Text)
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
