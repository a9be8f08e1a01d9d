"use strict";
// Runs the sandbox's snippet corpus through the desktop product's pipeline
// shape in Node: Sucrase transform, then React 18.3.1 production builds and
// react-test-renderer in a fresh vm context per run (libraries compiled once,
// as the Go sandbox shares its compiled goja programs), on a virtual clock.
// Usage: npm ci && node run.js [--json]
const fs = require("fs");
const path = require("path");
const vm = require("vm");
const { transform } = require("sucrase");

const repo = path.resolve(__dirname, "../..");

function readDir(dir) {
  const files = {};
  (function walk(rel) {
    for (const e of fs.readdirSync(path.join(dir, rel), { withFileTypes: true })) {
      if (e.name.startsWith(".") || e.name === "node_modules") continue;
      const r = rel ? rel + "/" + e.name : e.name;
      if (e.isDirectory()) walk(r);
      else if (e.isFile()) files[r] = fs.readFileSync(path.join(dir, r), "utf8");
    }
  })("");
  return files;
}

function corpus() {
  const c = { "standup-timer": readDir(path.join(repo, "examples/standup-timer")) };
  const base = path.join(__dirname, "corpus");
  for (const name of fs.readdirSync(base)) c[name] = readDir(path.join(base, name));
  return Object.fromEntries(Object.entries(c).sort(([a], [b]) => a.localeCompare(b)));
}

const head = "(function (exports, require, module) {";
const libFiles = {
  react: "react/cjs/react.production.min.js",
  "react/jsx-runtime": "react/cjs/react-jsx-runtime.production.min.js",
  "react-test-renderer": "react-test-renderer/cjs/react-test-renderer.production.min.js",
  scheduler: "scheduler/cjs/scheduler.production.min.js",
  "scheduler/unstable_mock": "scheduler/cjs/scheduler-unstable_mock.production.min.js",
};
const libScripts = {};
for (const [id, file] of Object.entries(libFiles)) {
  const src = fs.readFileSync(path.join(__dirname, "node_modules", file), "utf8");
  libScripts[id] = new vm.Script(head + src + "\n})", { filename: id });
}

function transformSnippet(files) {
  const out = {};
  for (const [p, src] of Object.entries(files)) {
    if (/\.(tsx|ts|jsx|js)$/.test(p)) {
      out[p] = transform(src, {
        transforms: ["typescript", "jsx", "imports"],
        jsxRuntime: "automatic",
        production: true,
        filePath: p,
      }).code;
    }
  }
  return out;
}

const allowed = new Set(["react", "react/jsx-runtime"]);
const suffixes = ["", ".tsx", ".ts", ".jsx", ".js", "/index.tsx", "/index.ts"];

async function smoke(files) {
  const code = transformSnippet(files);
  // Virtual clock, as in the Go sandbox.
  let now = 1704099600000, seq = 0, nextId = 0;
  const timers = new Map();
  const setTimer = (fn, ms, repeat, args) => {
    const d = Math.max(repeat ? 1 : 0, Number(ms) || 0);
    const t = { id: ++nextId, due: now + d, seq: ++seq, fn, args, interval: repeat ? d : 0 };
    timers.set(t.id, t);
    return t.id;
  };
  const console = { log() {}, info() {}, warn() {}, error() {}, debug() {} };
  const ctx = vm.createContext({
    console,
    setTimeout: (fn, ms, ...a) => setTimer(fn, ms, false, a),
    setInterval: (fn, ms, ...a) => setTimer(fn, ms, true, a),
    clearTimeout: (id) => timers.delete(id),
    clearInterval: (id) => timers.delete(id),
    queueMicrotask: (fn) => Promise.resolve().then(fn),
    fetch: () => new Promise(() => {}),
  });
  async function advance(ms) {
    const target = now + ms;
    for (;;) {
      let next = null;
      for (const t of timers.values()) if (t.due <= target && (!next || t.due < next.due || (t.due === next.due && t.seq < next.seq))) next = t;
      if (!next) break;
      now = next.due;
      if (next.interval) { next.due += next.interval; next.seq = ++seq; } else timers.delete(next.id);
      next.fn(...next.args);
      await null; // let Promise jobs run, as goja does after each callback
    }
    now = target;
  }
  const mods = {};
  function load(id, script, req) {
    const module = { exports: {} };
    mods[id] = module.exports;
    script.runInContext(ctx)(module.exports, req, module);
    mods[id] = module.exports;
    return module.exports;
  }
  function libRequire(id) {
    if (id in mods) return mods[id];
    if (!libScripts[id]) throw new Error(`module ${id} is not available`);
    return load(id, libScripts[id], libRequire);
  }
  function snippetRequire(from) {
    return (id) => {
      if (allowed.has(id)) return libRequire(id);
      if (id.startsWith("./") || id.startsWith("../")) {
        const joined = path.posix.join(path.posix.dirname(from), id);
        if (joined.endsWith(".css")) return {};
        for (const s of suffixes) {
          const p = joined + s;
          if (code[p] !== undefined) {
            if (p in mods) return mods[p];
            return load(p, new vm.Script(head + code[p] + "\n})", { filename: p }), snippetRequire(p));
          }
        }
      }
      throw new Error(`import ${id} is not allowed`);
    };
  }
  const React = libRequire("react");
  const TR = libRequire("react-test-renderer");
  const entry = snippetRequire("src/index")("./App");
  const root = TR.create(React.createElement(entry.default));
  await advance(0);
  await advance(3000);
  // One walk of the rendered tree counts its elements and collects their
  // onClick handlers in tree order, as the Go sandbox does.
  let elements = 0;
  const handlers = [];
  (function walk(n) {
    if (n == null) return;
    if (Array.isArray(n)) return n.forEach(walk);
    if (typeof n === "object") {
      elements++;
      if (n.props && typeof n.props.onClick === "function") handlers.push(n.props.onClick);
      walk(n.children);
    }
  })(root.toJSON());
  for (const h of handlers) {
    // One batch per click, as React DOM does and as the Go sandbox does.
    TR.unstable_batchedUpdates(() => h({ type: "click", preventDefault() {}, stopPropagation() {}, target: {}, currentTarget: {} }));
    await advance(0);
  }
  await advance(3000);
  root.unmount();
  await advance(0);
  return { elements, clicks: handlers.length };
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function main() {
  const c = corpus();
  const out = { node: process.version, snippets: {} };
  for (const [name, files] of Object.entries(c)) {
    for (let i = 0; i < 50; i++) transformSnippet(files);
    const tt = [];
    for (let i = 0; i < 200; i++) {
      const t0 = process.hrtime.bigint();
      transformSnippet(files);
      tt.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    let summary;
    for (let i = 0; i < 20; i++) summary = await smoke(files);
    const st = [];
    for (let i = 0; i < 50; i++) {
      const t0 = process.hrtime.bigint();
      await smoke(files);
      st.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    out.snippets[name] = { transform_ms: median(tt), smoke_ms: median(st), ...summary };
  }
  if (global.gc) global.gc();
  out.rss_mib = process.memoryUsage().rss / (1 << 20);
  if (process.argv.includes("--json")) {
    console.log(JSON.stringify(out, null, 2));
    return;
  }
  console.log(`node ${out.node}, RSS ${out.rss_mib.toFixed(1)} MiB after the runs`);
  console.log("snippet          transform(ms)  smoke-run(ms)  elements  clicks");
  for (const [n, r] of Object.entries(out.snippets)) {
    console.log(`${n.padEnd(16)} ${r.transform_ms.toFixed(3).padStart(13)}  ${r.smoke_ms.toFixed(3).padStart(13)}  ${String(r.elements).padStart(8)}  ${String(r.clicks).padStart(6)}`);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
