package worker

import (
	"strconv"
	"unicode/utf8"

	"github.com/dop251/goja"

	"github.com/roomrelay/roomrelay/sandbox"
)

// summarize counts host elements and text in the test renderer's JSON tree,
// reading only plain data properties, and returns the elements' onClick
// handlers in tree order (what a click phase clicks: the same walk, so no
// second pass over the tree). Strings are told apart by type, not by
// Export, which would copy every object's whole subtree into Go maps.
func summarize(tree goja.Value) (*sandbox.RenderSummary, []goja.Value) {
	s := &sandbox.RenderSummary{Elements: map[string]int{}}
	var handlers []goja.Value
	var walk func(v goja.Value, depth int)
	walk = func(v goja.Value, depth int) {
		if v == nil || goja.IsNull(v) || goja.IsUndefined(v) || depth > 200 {
			return
		}
		if str, ok := v.(goja.String); ok {
			s.TextLength += utf8.RuneCountInString(str.String())
			return
		}
		o, ok := v.(*goja.Object)
		if !ok {
			return
		}
		if o.ClassName() == "Array" {
			eachItem(o, func(v goja.Value) { walk(v, depth+1) })
			return
		}
		if t := exportString(o.Get("type")); t != "" {
			props, _ := o.Get("props").(*goja.Object)
			handlers = countElement(s, handlers, t, props)
		}
		walk(o.Get("children"), depth+1)
	}
	walk(tree, 0)
	return s, handlers
}

// summarizeHost is summarize over the test renderer's host tree itself,
// the container's children that toJSON copies: the same figures without
// the copy (a new object per element, its props filtered through
// Object.keys, a defineProperty), which was 8% of the JavaScript time of a
// 1,207-element render. A host node is {tag: "INSTANCE", type, props,
// children, isHidden} or {tag: "TEXT", text, isHidden}; hidden nodes are
// left out, as toJSON leaves them out. An element's lone string or number
// child is its text content, in props.children (see libPatches).
func summarizeHost(children goja.Value) (*sandbox.RenderSummary, []goja.Value) {
	s := &sandbox.RenderSummary{Elements: map[string]int{}}
	var handlers []goja.Value
	var node func(v goja.Value, depth int)
	list := func(v goja.Value, depth int) {
		if o, ok := v.(*goja.Object); ok && o.ClassName() == "Array" && depth <= 200 {
			eachItem(o, func(v goja.Value) { node(v, depth+1) })
		}
	}
	node = func(v goja.Value, depth int) {
		o, ok := v.(*goja.Object)
		if !ok || depth > 200 {
			return
		}
		if h := o.Get("isHidden"); h != nil && h.ToBoolean() {
			return
		}
		switch exportString(o.Get("tag")) {
		case "TEXT":
			if str, ok := o.Get("text").(goja.String); ok {
				s.TextLength += utf8.RuneCountInString(str.String())
			}
		case "INSTANCE":
			t := exportString(o.Get("type"))
			if t == "" {
				return
			}
			props, _ := o.Get("props").(*goja.Object)
			handlers = countElement(s, handlers, t, props)
			s.TextLength += textContentLength(props)
			list(o.Get("children"), depth+1)
		}
	}
	list(children, -1)
	return s, handlers
}

// countElement counts one host element of type t in s and appends its
// onClick handler, if its props (nil: none) have one, to handlers: the
// same for both walks.
func countElement(s *sandbox.RenderSummary, handlers []goja.Value, t string, props *goja.Object) []goja.Value {
	s.Elements[t]++
	s.ElementCount++
	if props != nil {
		if h := props.Get("onClick"); h != nil {
			if _, ok := goja.AssertFunction(h); ok {
				handlers = append(handlers, h)
			}
		}
	}
	return handlers
}

// eachItem calls f on an array's items, the first 10,000 at most.
func eachItem(o *goja.Object, f func(goja.Value)) {
	n := int(o.Get("length").ToInteger())
	for i := 0; i < n && i < 10_000; i++ {
		f(o.Get(strconv.Itoa(i)))
	}
}

// textContentLength is the length of a host element's text content: its
// props.children when that is a string or a number (as toJSON shows it).
func textContentLength(props *goja.Object) int {
	if props == nil {
		return 0
	}
	switch c := props.Get("children"); {
	case c == nil:
		return 0
	case goja.IsString(c):
		return utf8.RuneCountInString(c.String())
	case goja.IsNumber(c):
		return len(c.String())
	}
	return 0
}
