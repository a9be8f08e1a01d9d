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
			n := int(o.Get("length").ToInteger())
			for i := 0; i < n && i < 10_000; i++ {
				walk(o.Get(strconv.Itoa(i)), depth+1)
			}
			return
		}
		if t := exportString(o.Get("type")); t != "" {
			s.Elements[t]++
			s.ElementCount++
			if props, ok := o.Get("props").(*goja.Object); ok {
				if h := props.Get("onClick"); h != nil {
					if _, ok := goja.AssertFunction(h); ok {
						handlers = append(handlers, h)
					}
				}
			}
		}
		walk(o.Get("children"), depth+1)
	}
	walk(tree, 0)
	return s, handlers
}
