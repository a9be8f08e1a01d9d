package worker

import "github.com/dop251/goja"

// install sets up the globals a snippet sees: console, timers on the virtual
// clock, queueMicrotask, a fetch that never settles, and a virtual Date.
func (r *run) install() error {
	vm := r.vm
	vm.SetPromiseRejectionTracker(func(p *goja.Promise, op goja.PromiseRejectionOperation) {
		if op == goja.PromiseRejectionReject {
			r.rejectN++
			r.rejected[p] = r.rejectN
		} else {
			delete(r.rejected, p)
		}
	})
	host := vm.NewObject()
	set := func(name string, fn func(goja.FunctionCall) goja.Value) {
		_ = host.Set(name, fn)
	}
	set("now", func(goja.FunctionCall) goja.Value { return vm.ToValue(r.clock.now) })
	set("log", func(c goja.FunctionCall) goja.Value {
		r.console.log(c.Argument(0).String(), c.Arguments[1:])
		return goja.Undefined()
	})
	set("setTimer", func(c goja.FunctionCall) goja.Value {
		return vm.ToValue(r.setTimer(c.Argument(0), c.Argument(1), c.Argument(2).ToBoolean(), c.Arguments[3:]))
	})
	set("clearTimer", func(c goja.FunctionCall) goja.Value {
		if id := c.Argument(0).ToInteger(); id > 0 {
			r.clock.clearTimer(id)
		}
		return goja.Undefined()
	})
	fn, err := vm.RunProgram(r.lib.prelude)
	if err != nil {
		return err
	}
	helpers, err := r.call(fn, host)
	if err != nil {
		return err
	}
	r.helpers = helpers.ToObject(vm)
	return nil
}

// preludeSource runs first in every fresh runtime. It receives the host
// functions (virtual clock, console sink, timers), installs the globals a
// snippet may use and returns the harness helpers. Built-ins the harness
// relies on are captured before snippet code can replace them.
const preludeSource = `(function (host) {
"use strict";
var G = globalThis;
var RealDate = G.Date, construct = Reflect.construct, slice = Array.prototype.slice;
var apply = Reflect.apply, defineProperty = Object.defineProperty, stringify = JSON.stringify;
var hostNow = host.now, hostLog = host.log, setTimer = host.setTimer, clearTimer = host.clearTimer;
var P = Promise, resolved = P.resolve(), then = P.prototype.then, isArray = Array.isArray;

function define(obj, name, value) {
  defineProperty(obj, name, { value: value, writable: true, configurable: true, enumerable: false });
}

// Date on the virtual clock: no way back to the real one.
function VirtualDate() {
  var args = apply(slice, arguments, []);
  if (new.target === undefined) return new RealDate(hostNow()).toString();
  if (args.length === 0) return construct(RealDate, [hostNow()], new.target);
  return construct(RealDate, args, new.target);
}
defineProperty(VirtualDate, "prototype", { value: RealDate.prototype, writable: false });
defineProperty(VirtualDate, "name", { value: "Date" });
defineProperty(VirtualDate, "length", { value: 7 });
define(RealDate.prototype, "constructor", VirtualDate);
define(VirtualDate, "now", function now() { return hostNow(); });
define(VirtualDate, "UTC", RealDate.UTC);
define(VirtualDate, "parse", RealDate.parse);
define(G, "Date", VirtualDate);

function fmt(v) {
  if (typeof v === "string") return v;
  if (typeof v === "function") return "[function " + (v.name || "anonymous") + "]";
  if (typeof v === "symbol") return "Symbol()";
  if (v !== null && typeof v === "object") {
    if (v instanceof Error) return String(v.name) + ": " + String(v.message);
    try { var s = stringify(v); return s === undefined ? "[object]" : s.slice(0, 300); } catch (e) { return "[object]"; }
  }
  return String(v);
}
function logger(level) {
  return function () {
    var out = [level];
    for (var i = 0; i < arguments.length && i < 20; i++) out[out.length] = fmt(arguments[i]);
    apply(hostLog, undefined, out);
  };
}
var console = {};
["log", "info", "warn", "error", "debug", "trace"].forEach(function (l) { define(console, l, logger(l)); });
define(G, "console", console);

define(G, "setTimeout", function setTimeout(fn, ms) {
  return apply(setTimer, undefined, [fn, ms, false].concat(apply(slice, arguments, [2])));
});
define(G, "setInterval", function setInterval(fn, ms) {
  return apply(setTimer, undefined, [fn, ms, true].concat(apply(slice, arguments, [2])));
});
define(G, "clearTimeout", function clearTimeout(id) { clearTimer(id); });
define(G, "clearInterval", function clearInterval(id) { clearTimer(id); });
define(G, "queueMicrotask", function queueMicrotask(fn) {
  if (typeof fn !== "function") throw new TypeError("queueMicrotask: the callback must be a function");
  apply(then, resolved, [function () { fn(); }]);
});
// The network never answers: a snippet that fetches renders its loading state.
define(G, "fetch", function fetch() { return new P(function () {}); });

function render(React, TR, App) {
  return TR.create(React.createElement(App));
}
function toJSON(root) { return root.toJSON(); }
// The host tree toJSON copies from (the container's children), found
// through React 18's fibers from the root's first test instance; null
// when it is not there (nothing rendered), and the caller uses toJSON.
function hostChildren(root) {
  var f;
  try { f = root.root._fiber; } catch (e) { return null; }
  for (var i = 0; f && f.return && i < 10000; i++) f = f.return;
  var c = f && f.tag === 3 && f.stateNode && f.stateNode.containerInfo;
  return c && c.tag === "CONTAINER" && isArray(c.children) ? c.children : null;
}
// React DOM runs a click's handlers in one batch, so their setState calls
// render once; the test renderer's legacy root renders after each of them
// unless it is asked to batch.
function click(TR, handler) {
  var ev = {
    type: "click", bubbles: true, defaultPrevented: false, target: { value: "", checked: false }, currentTarget: {},
    nativeEvent: {}, preventDefault: function () { ev.defaultPrevented = true; }, stopPropagation: function () {},
    persist: function () {}
  };
  TR.unstable_batchedUpdates(function () { handler(ev); });
}
function unmount(root) { root.unmount(); }
return { render: render, toJSON: toJSON, hostChildren: hostChildren, click: click, unmount: unmount };
})`

// sdkSource is the room SDK module a snippet may import as SDKModule. Its
// storage is a Map inside the run: nothing leaves the sandbox.
const sdkSource = `"use strict";
var React = require("react");
var store = new Map();
var MAX_VALUE = 64 * 1024, MAX_KEYS = 1000;
function checkKey(key) {
  if (typeof key !== "string" || key.length === 0 || key.length > 200) throw new TypeError("storage key must be a non-empty string of at most 200 characters");
}
var storage = Object.freeze({
  get: function (key) {
    try { checkKey(key); } catch (e) { return Promise.reject(e); }
    var v = store.get(key);
    return Promise.resolve(v === undefined ? null : JSON.parse(v));
  },
  set: function (key, value) {
    try { checkKey(key); } catch (e) { return Promise.reject(e); }
    var s = JSON.stringify(value);
    if (s === undefined) return Promise.reject(new TypeError("storage value must be JSON-serializable"));
    if (s.length > MAX_VALUE) return Promise.reject(new RangeError("storage value larger than 64 KiB"));
    if (!store.has(key) && store.size >= MAX_KEYS) return Promise.reject(new RangeError("storage holds at most 1000 keys"));
    store.set(key, s);
    return Promise.resolve();
  },
  remove: function (key) { store.delete(key); return Promise.resolve(); },
  keys: function () { return Promise.resolve(Array.from(store.keys())); }
});
function useStoredState(key, initial) {
  var st = React.useState(initial), value = st[0], setValue = st[1];
  React.useEffect(function () {
    var live = true;
    storage.get(key).then(function (v) { if (live && v !== null) setValue(v); });
    return function () { live = false; };
  }, [key]);
  var set = React.useCallback(function (next) {
    setValue(function (prev) {
      var v = typeof next === "function" ? next(prev) : next;
      storage.set(key, v).catch(function (e) { console.error("storage.set failed: " + e.message); });
      return v;
    });
  }, [key]);
  return [value, set];
}
exports.storage = storage;
exports.useStoredState = useStoredState;
exports.room = Object.freeze({ id: "sandbox", name: "Sandbox room", kind: "local" });
`
