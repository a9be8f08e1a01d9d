package worker

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/dop251/goja"
)

// TestLibraryPatchesApply: every patch finds its code exactly once in the
// pinned runtime, and a patch whose code is not there fails the compile
// with its module named instead of running an unpatched React silently.
func TestLibraryPatchesApply(t *testing.T) {
	testLibraries(t)
	srcs := maps.Clone(libSrcs)
	if err := patchLibraries(srcs, libPatches); err != nil {
		t.Fatal(err)
	}
	for _, p := range libPatches {
		if !strings.Contains(srcs[p.module], p.new) {
			t.Errorf("%s: patched code missing after patchLibraries", p.module)
		}
	}

	stale := slices.Clone(libPatches)
	stale[0].old += "/* not in React */"
	_, err := compilePatched(libSrcs, stale)
	if err == nil || !strings.Contains(err.Error(), stale[0].module) || !strings.Contains(err.Error(), "occurs 0 times") {
		t.Fatalf("compile with a stale patch: %v, want an error naming %s", err, stale[0].module)
	}
}

// shapeProbe renders a component, updates it (which creates the fibers'
// alternates) and calls jsx with a config that has inherited, reserved and
// defaulted properties; it returns what a snippet could observe of the
// fibers and the elements: their own keys in order and their values.
const shapeProbe = `(function (React, TR, J) {
  var out = [];
  function Child(p) { return J.jsx("b", { children: [p.n] }); }
  Child.defaultProps = { a: 9, z: 3 };
  function App() {
    var s = React.useState(0);
    return J.jsxs("div", { id: "x", onClick: function () { s[1](s[0] + 1); }, children: [J.jsx(Child, { n: s[0] }, "c"), "t"] });
  }
  function keysOf(f) {
    var seen = [];
    for (var i = 0; f && i < 6; i++, f = f.child) seen.push(f.tag + ":" + Object.keys(f).join(","));
    return seen.join(" | ");
  }
  var root = TR.create(React.createElement(App));
  out.push(keysOf(root.root._fiber));
  TR.unstable_batchedUpdates(function () { root.root.findByType("div").props.onClick(); });
  out.push(keysOf(root.root._fiber), keysOf(root.root._fiber.alternate), JSON.stringify(root.toJSON()));
  function Cfg() { this.b = 2; this.key = "k"; this.ref = null; this.a = undefined; this.__self = 1; }
  Cfg.prototype.inherited = 1;
  var el = J.jsx(Child, new Cfg(), "kk");
  out.push(JSON.stringify([el.key, el.ref, Object.keys(el), Object.keys(el.props), el.props]));
  el = J.jsx("i", { key: 7, children: "x" });
  out.push(JSON.stringify([el.key, Object.keys(el.props)]));
  root.unmount();
  // An element's lone string or number child, before and after updates
  // that turn it into elements, an empty string or other text.
  var set;
  function Texts() {
    var s = React.useState(0), k = s[0];
    set = s[1];
    return J.jsxs("ul", { children: [
      J.jsx("li", { children: k ? "changed" : "text" }),
      J.jsx("li", { children: k }),
      J.jsx("li", { children: k ? "" : "gone" }),
      J.jsx("li", { children: k ? J.jsx("em", { children: "now an element" }) : "was text" }),
      J.jsx("li", { children: k ? "now text" : J.jsx("em", { children: "was an element" }) }),
      J.jsx("li", { children: ["mixed ", k] }),
      J.jsx("li", { children: k ? 1.5e21 : null }),
      J.jsx("li", { children: k === 2 ? undefined : -0.5 })
    ] });
  }
  root = TR.create(React.createElement(Texts));
  for (var step = 1; step <= 3; step++) {
    out.push(JSON.stringify(root.toJSON()));
    TR.unstable_batchedUpdates(function () { set(step % 3); });
  }
  root.unmount();
  // Keyed children moved around (the host tree's order is what placement
  // and getHostSibling decide): reversed, rotated, shuffled, with rows
  // added and removed, rows that are fragments or components, a portal-less
  // nested list, and a static element after the list.
  var orders = [
    [1, 2, 3, 4, 5, 6, 7, 8], [8, 7, 6, 5, 4, 3, 2, 1], [2, 3, 4, 5, 6, 7, 8, 1], [5, 1, 7, 3, 8, 2, 6, 4],
    [9, 5, 10, 1, 7, 11], [11, 7, 1, 10, 5, 9, 12, 13], [13, 12], [3, 13, 1, 12, 2], [1, 2, 3, 12, 13]
  ];
  // Then 40 pseudo-random subsets of 1..24 in pseudo-random orders.
  var seed = 12345;
  function rnd(n) { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; }
  for (var g = 0; g < 40; g++) {
    var ids = [];
    for (var id = 1; id <= 24; id++) if (rnd(3)) ids.push(id);
    for (var x = ids.length - 1; x > 0; x--) { var y = rnd(x + 1), tmp = ids[x]; ids[x] = ids[y]; ids[y] = tmp; }
    orders.push(ids);
  }
  function Row(p) { return p.id % 3 === 0 ? J.jsxs(React.Fragment, { children: [J.jsx("i", { children: p.id }), J.jsx("u", { children: p.id })] }) : J.jsx("li", { children: p.id }); }
  function List(p) {
    return J.jsxs("ol", { children: [
      J.jsx("s", { children: "head" }),
      p.order.map(function (id) {
        if (id % 4 === 0) return J.jsx(React.Fragment, { children: J.jsx("b", { children: id }) }, id);
        if (id % 5 === 0) return J.jsx("ul", { children: p.order.slice().reverse().map(function (n) { return J.jsx("em", { children: n }, n); }) }, id);
        return J.jsx(Row, { id: id }, id);
      }),
      J.jsx("s", { children: "tail" })
    ] });
  }
  root = TR.create(J.jsx(List, { order: orders[0] }));
  for (var o = 1; o < orders.length; o++) {
    root.update(J.jsx(List, { order: orders[o] }));
    out.push(JSON.stringify(root.toJSON()));
  }
  root.unmount();
  return out.join("\n");
})`

// TestPatchedLibrariesKeepShapes: the patched React builds fibers and
// elements with the same own properties, in the same order and with the
// same values, as the unpatched build.
func TestPatchedLibrariesKeepShapes(t *testing.T) {
	testLibraries(t)
	probe := func(patches []libPatch) string {
		lib, err := compilePatched(libSrcs, patches)
		if err != nil {
			t.Fatal(err)
		}
		r := newRun(lib, testLimits)
		if r.prepErr != nil {
			t.Fatal(r.prepErr)
		}
		jsx, err := r.require("react/jsx-runtime")
		if err != nil {
			t.Fatal(err)
		}
		fn, err := r.vm.RunString(shapeProbe)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := goja.AssertFunction(fn)
		v, err := f(goja.Undefined(), r.react, r.renderer, jsx)
		if err != nil {
			t.Fatal(err)
		}
		return v.String()
	}
	want, got := probe(nil), probe(libPatches)
	if got != want {
		t.Fatalf("patched React differs from the pinned build:\npatched:\n%s\npinned:\n%s", got, want)
	}
	t.Logf("\n%s", got)
}

// BenchmarkLibraryPatches is a smoke-run of each corpus snippet (a fresh
// runtime, React loaded, then the run; the bundle built once) with the
// pinned React builds and with libPatches applied, so the patches' effect
// is measured in one process: compare the pinned and patched lines.
func BenchmarkLibraryPatches(b *testing.B) {
	names, corpus := benchCorpus(b)
	testLibraries(b)
	pinned, err := compilePatched(libSrcs, nil)
	if err != nil {
		b.Fatal(err)
	}
	patched := testLibraries(b)
	for _, n := range names {
		bundle, err := Build(corpus[n])
		if err != nil {
			b.Fatal(err)
		}
		for _, v := range []struct {
			name string
			lib  *libraries
		}{{"pinned", pinned}, {"patched", patched}} {
			b.Run(n+"/"+v.name, func(b *testing.B) {
				for b.Loop() {
					if res, _ := runBundle(v.lib, bundle, testLimits); !res.OK {
						b.Fatal(res.Summary())
					}
				}
			})
		}
	}
}
