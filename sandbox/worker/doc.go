// Package worker is the sandbox's worker side: Build bundles a snippet's
// file map in memory with esbuild (only relative imports inside the snippet
// and the modules in AllowedModules resolve; nothing is read from disk), and
// Main serves a sandbox.Pool's smoke-runs on stdin/stdout, each in a fresh
// goja runtime with React loaded, timers on a virtual clock.
//
// Importing this package is what links esbuild and goja into a binary: the
// full roomrelay imports it (its hidden sandbox-worker subcommand), the
// device binary cmd/roomrelay-agent does not and starts cmd/roomrelay-sandbox
// instead. Main must run in a process of its own: it lowers the process's
// memory limits.
//
// One concern a file: build.go (esbuild), run.go (one smoke-run and its
// steps), modules.go (module loader), clock.go (virtual clock and timers),
// console.go, prelude.go (the globals), failure.go and location.go (error
// messages and snippet positions), summary.go (render summary), worker.go
// (the worker process), limits_*.go (RLIMIT_DATA and the resident size).
package worker
