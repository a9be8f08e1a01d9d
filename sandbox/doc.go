// Package sandbox turns an approved snippet (a map of relative paths to TSX,
// TS, JS, CSS and JSON sources with src/App.tsx as entry) into a CommonJS
// bundle with esbuild and smoke-runs it with real React in a fresh goja
// runtime inside a worker process.
//
// The pieces:
//
//   - EnsureRuntime fetches the pinned React runtime (npm tarballs verified
//     against pinned sha512 integrity strings) into a cache directory. It is
//     the only network I/O this package does.
//   - Pool runs smoke-runs in worker processes, with a memory cap, a stack
//     limit, a wall-clock interrupt and SIGKILL after a grace period.
//   - The worker side (esbuild's Build, the goja smoke-run, worker.Main) is
//     the package sandbox/worker; importing it is what links esbuild and
//     goja. The full roomrelay binary imports it and runs the worker as a
//     hidden subcommand of itself; the device binary (cmd/roomrelay-agent)
//     does not, and starts cmd/roomrelay-sandbox instead, so the
//     long-running agent carries no JavaScript engine (3 MiB less resident
//     memory, a smaller attack surface). This package is what both sides
//     share: the Pool, the runtime fetch, the worker protocol and Result.
//
// A snippet never gets a host API: no require beyond the allowlist, no
// process, env, fs, network, DOM or real clock. Timers run on a virtual clock.
package sandbox
