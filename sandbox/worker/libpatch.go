package worker

import (
	"fmt"
	"strings"
)

// libPatch rewrites one exact piece of a pinned library's production build
// into code that does the same thing on a path goja runs faster. The
// libraries are pinned by version and integrity (sandbox.LoadRuntime), so
// each piece is found exactly once or the patch table is out of date: then
// compileLibraries fails, and TestLibraryPatchesApply names the patch.
type libPatch struct {
	module   string // module id, as in libraries.modules
	why      string
	old, new string
}

// libPatches are measured on the bench corpus (bench/sandbox). Each keeps
// what a snippet and the harness observe: fibers and elements with the same
// own properties in the same order, the same toJSON. The one change of
// behaviour is React DOM's: an element's lone string or number child is its
// text content, not a text node of its own (summarizeHost reads it there).
var libPatches = []libPatch{
	{
		module: "react-test-renderer",
		why: "a host element whose only child is a string or a number holds it as its text content, as " +
			"React DOM's shouldSetTextContent does (the test renderer's says never): no text fiber, no " +
			"text instance, and no alternate of either, a third of the fibers of a table; the text stays in " +
			"the element's props, which commitUpdate keeps current",
		old: "case 5:return Ic(b),d=b.pendingProps.children,",
		new: `case 5:return Ic(b),d=b.pendingProps.children,("string"===typeof d||"number"===typeof d)&&(d=null),`,
	},
	{
		module: "react-test-renderer",
		why: "toJSON shows an element's text content as the one text child the stock renderer would " +
			"have made of it (none for an empty string), so its output is unchanged",
		old: `a={type:a.type,props:b,children:c};Object.defineProperty(a,"$$typeof"`,
		new: `null===c&&(e=a.props&&a.props.children,"string"===typeof e&&""!==e||"number"===typeof e)&&(c=[""+e]);` +
			`a={type:a.type,props:b,children:c};Object.defineProperty(a,"$$typeof"`,
	},
	{
		module: "react-test-renderer",
		why: "getHostSibling remembers, for one commit's mutation phase, the answer of every sibling its " +
			"scan skipped: a reversed list of n rows otherwise scans n²/2 placed siblings (a third of the " +
			"table's click). A skipped sibling's own scan is the rest of the same scan, and nothing on " +
			"that path changes before it is placed (flags are cleared only on fibers already placed)",
		old: "function Ue(a){a:for(;;){",
		new: "var __rrHostSib=null,__rrMap=Map;" +
			"function Ue(a){var M=__rrHostSib;if(null===M)return __rrUe(a,null);var r=M.get(a);if(void 0!==r)return r;" +
			"var s=[];r=__rrUe(a,s);for(var i=0;i<s.length;i++)M.set(s[i],r);return r}" +
			"function __rrUe(a,s){a:for(;;){null!==s&&s.push(a);",
	},
	{
		module: "react-test-renderer",
		why:    "the mutation phase of each commit starts getHostSibling's memory empty and drops it after",
		old:    "bf(c,a);a.current=c;",
		new:    "__rrHostSib=new __rrMap;try{bf(c,a)}finally{__rrHostSib=null}a.current=c;",
	},
	{
		module: "react-test-renderer",
		why: "createFiber builds the fiber as an object literal: goja stores a literal's properties " +
			"directly, where `this.x = ...` in a constructor first looks up the prototype chain for a " +
			"setter, 21 times per fiber (no code reads a fiber's prototype or constructor)",
		old: "function Wf(a,b,c,d){return new Vf(a,b,c,d)}",
		new: "function Wf(a,b,c,d){return{tag:a,key:c,elementType:null,type:null,stateNode:null,return:null," +
			"child:null,sibling:null,index:0,ref:null,pendingProps:b,memoizedProps:null,updateQueue:null," +
			"memoizedState:null,dependencies:null,mode:d,flags:0,subtreeFlags:0,deletions:null,lanes:0," +
			"childLanes:0,alternate:null}}",
	},
	{
		module: "react/jsx-runtime",
		why:    "Object.keys for jsx(), captured when the module loads (before any snippet code runs)",
		old:    "p={key:!0,ref:!0,__self:!0,__source:!0};",
		new:    "p={key:!0,ref:!0,__self:!0,__source:!0},__rrKeys=Object.keys;",
	},
	{
		module: "react/jsx-runtime",
		why: "jsx() copies the config's own enumerable properties with Object.keys instead of for…in " +
			"plus hasOwnProperty, the same keys in the same order: goja's for…in walks the prototype " +
			"chain (Object.prototype's keys included) for every element",
		old: "for(b in a)m.call(a,b)&&!p.hasOwnProperty(b)&&(d[b]=a[b]);",
		new: "for(var K=__rrKeys(a),i=0;i<K.length;i++)b=K[i],p.hasOwnProperty(b)||(d[b]=a[b]);",
	},
}

// patchLibraries applies patches to the library sources (module id →
// source) in place.
func patchLibraries(srcs map[string]string, patches []libPatch) error {
	for _, p := range patches {
		src, ok := srcs[p.module]
		if !ok {
			return fmt.Errorf("library patch for %s: module missing", p.module)
		}
		if n := strings.Count(src, p.old); n != 1 {
			return fmt.Errorf("library patch for %s (%s): the code to replace occurs %d times, want once", p.module, p.why, n)
		}
		srcs[p.module] = strings.Replace(src, p.old, p.new, 1)
	}
	return nil
}
