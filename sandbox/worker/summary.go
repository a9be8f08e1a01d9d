package worker

import (
	"strconv"
	"unicode/utf8"

	"github.com/dop251/goja"

	"github.com/roomrelay/roomrelay/sandbox"
)

// summarize counts host elements and text in the test renderer's JSON tree,
// reading only plain data properties. Strings are told apart by type, not
// by Export, which would copy every object's whole subtree into Go maps.
func summarize(tree goja.Value) *sandbox.RenderSummary {
	s := &sandbox.RenderSummary{Elements: map[string]int{}}
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
		}
		walk(o.Get("children"), depth+1)
	}
	walk(tree, 0)
	return s
}
