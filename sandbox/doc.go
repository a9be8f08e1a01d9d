// Package sandbox turns an approved snippet (a map of relative paths to TSX,
// TS, JS, CSS and JSON sources with src/App.tsx as entry) into a CommonJS
// bundle with esbuild and smoke-runs it with real React in a fresh goja
// runtime inside a worker process.
//
// The pieces:
//
//   - Build bundles a file map in memory. Only relative imports inside the
//     snippet and the modules in AllowedModules resolve; nothing is read from
//     disk.
//   - EnsureRuntime fetches the pinned React runtime (npm tarballs verified
//     against pinned sha512 integrity strings) into a cache directory. It is
//     the only network I/O this package does.
//   - Pool runs smoke-runs in worker processes whose body is WorkerMain, with
//     a memory cap, a stack limit, a wall-clock interrupt and SIGKILL after a
//     grace period. The worker is the same binary started with a hidden
//     subcommand, except in the device build (-tags agentonly): there the
//     worker side (Build, WorkerMain: esbuild and goja) is left out and
//     cmd/roomrelay-sandbox is the worker, so the long-running agent carries
//     no JavaScript engine (3 MiB less resident memory, a smaller attack
//     surface). The Pool and the runtime fetch build either way.
//
// A snippet never gets a host API: no require beyond the allowlist, no
// process, env, fs, network, DOM or real clock. Timers run on a virtual clock.
package sandbox
