package review

import (
	"bytes"
	"fmt"
	"html/template"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/chroma/v2"
	chromahtml "github.com/alecthomas/chroma/v2/formatters/html"
)

// Syntax highlighting happens here, on the server, so the page needs no
// script and its CSP stays strict: chroma splits a file into tokens, and
// each token becomes an escaped <span> with a class that highlight.css
// (served from this origin) colours. The three lexers are rule tables of
// our own (lexers.go), built on first use.

// lexerFor maps a file extension to its lexer.
var lexerFor = map[string]string{
	".ts": "typescript", ".tsx": "typescript", ".mts": "typescript", ".cts": "typescript",
	// TypeScript's grammar is a superset: good enough to colour JavaScript.
	".js": "typescript", ".jsx": "typescript", ".mjs": "typescript", ".cjs": "typescript",
	".css":  "css",
	".json": "json",
}

// lexers are built on first use (lexers.go): most roomrelay processes
// never render a page.
var lexers = map[string]func() (chroma.Lexer, error){
	"typescript": lazyLexer("TypeScript", typescriptRules),
	"css":        lazyLexer("CSS", cssRules),
	"json":       lazyLexer("JSON", jsonRules),
}

func lazyLexer(name string, rules func() chroma.Rules) func() (chroma.Lexer, error) {
	return sync.OnceValues(func() (chroma.Lexer, error) {
		// DotAll off, EnsureNL off: the tokens must be the file's bytes.
		l, err := chroma.NewLexer(&chroma.Config{Name: name}, rules)
		if err != nil {
			return nil, fmt.Errorf("review: lexer %s: %w", name, err)
		}
		return chroma.Coalesce(l), nil
	})
}

// highlightBudget bounds the time spent lexing one page: chroma's lexers
// are backtracking regexps, and a proposed file is written by someone else.
// Past it, the remaining files are shown without colour (still escaped,
// still numbered).
const highlightBudget = 2 * time.Second

// code is one file rendered for the page.
type code struct {
	HTML  template.HTML // the lines, each a numbered, escaped <span class="line">
	Lang  string        // the lexer's name, "" when shown as plain text
	Lines int
}

// renderCode numbers and highlights content; id prefixes each line's
// anchor ("f1" → #f1-L12). Every byte of content passes through
// template.HTMLEscapeString; the only markup is this function's own.
func renderCode(id, filePath, content string, deadline time.Time) code {
	var lines [][]chroma.Token
	lang := ""
	if name, ok := lexerFor[strings.ToLower(path.Ext(filePath))]; ok && time.Now().Before(deadline) {
		if l, err := lexers[name](); err == nil {
			if toks, ok := tokenise(l, content, deadline); ok {
				lines = chroma.SplitTokensIntoLines(toks)
				lang = l.Config().Name
			}
		}
	}
	if lang == "" {
		lines = chroma.SplitTokensIntoLines([]chroma.Token{{Type: chroma.Text, Value: content}})
	}
	if content == "" {
		lines = nil
	}
	var b strings.Builder
	for i, line := range lines {
		n := strconv.Itoa(i + 1)
		b.WriteString(`<span class="line" id="` + id + `-L` + n + `"><span class="ln">` + n + `</span><span class="cl">`)
		for _, t := range line {
			cls := tokenClass(t.Type)
			if cls != "" {
				b.WriteString(`<span class="` + cls + `">`)
			}
			writeEscaped(&b, t.Value)
			if cls != "" {
				b.WriteString(`</span>`)
			}
		}
		b.WriteString(`</span></span>`)
	}
	return code{HTML: template.HTML(b.String()), Lang: lang, Lines: len(lines)}
}

// tokenise runs the lexer until the deadline; false if it ran out or the
// tokens are not the file's bytes. EnsureLF off: chroma's default turns a
// carriage return into a newline, which would hide it from the reviewer.
func tokenise(l chroma.Lexer, content string, deadline time.Time) ([]chroma.Token, bool) {
	it, err := l.Tokenise(&chroma.TokeniseOptions{State: "root"}, content)
	if err != nil {
		return nil, false
	}
	var toks []chroma.Token
	n := 0
	for t := it(); t != chroma.EOF; t = it() {
		toks = append(toks, t)
		n += len(t.Value)
		if len(toks)%256 == 0 && time.Now().After(deadline) {
			return nil, false
		}
	}
	// What is shown must be what is approved, byte for byte.
	if n != len(content) {
		return nil, false
	}
	var b strings.Builder
	b.Grow(n)
	for _, t := range toks {
		b.WriteString(t.Value)
	}
	return toks, b.String() == content
}

// writeEscaped writes s as HTML text, with every rune Printable would
// replace shown as its marker in a <span class="hidden-char">.
func writeEscaped(b *strings.Builder, s string) {
	for s != "" {
		i := strings.IndexFunc(s, hidden)
		if i < 0 {
			b.WriteString(template.HTMLEscapeString(s))
			return
		}
		b.WriteString(template.HTMLEscapeString(s[:i]))
		r := []rune(s[i:])[0]
		b.WriteString(`<span class="hidden-char hidden-` + kindClass[KindOf(r)] + `" title="` + kindTitle[KindOf(r)] + `">` + Marker(r) + `</span>`)
		s = s[i+len(string(r)):]
	}
}

var kindClass = map[Kind]string{Control: "control", Bidi: "bidi", Invisible: "invisible"}

var kindTitle = map[Kind]string{Control: "control character", Bidi: "bidi control: reorders how the text reads",
	Invisible: "invisible character"}

// tokenClass is chroma's short class for t ("k", "s2", "c1"), from the
// nearest type that has one, as chroma's HTML formatter names them.
func tokenClass(t chroma.TokenType) string {
	for ; t != 0; t = t.Parent() {
		if cls, ok := chroma.StandardTypes[t]; ok {
			return cls
		}
	}
	return ""
}

// highlightStyle is GitHub's light palette (chroma's "github" style),
// defined here so chroma's registry of every style is not linked in. Error
// tokens (where a lexer lost its way, e.g. on some TSX generics) stay plain:
// red there would read as a finding; hidden characters have their own mark.
var highlightStyle = sync.OnceValue(func() *chroma.Style {
	return chroma.MustNewStyle("roomrelay", chroma.StyleEntries{
		chroma.Background:          "bg:#fbfbfd",
		chroma.Keyword:             "#cf222e",
		chroma.NameAttribute:       "#1f2328",
		chroma.NameBuiltin:         "#6639ba",
		chroma.NameBuiltinPseudo:   "#6a737d",
		chroma.NameClass:           "#1f2328",
		chroma.NameConstant:        "#0550ae",
		chroma.NameDecorator:       "#0550ae",
		chroma.NameEntity:          "#6639ba",
		chroma.NameFunction:        "#6639ba",
		chroma.NameLabel:           "bold #990000",
		chroma.NameTag:             "#0550ae",
		chroma.NameVariable:        "#953800",
		chroma.LiteralString:       "#0a3069",
		chroma.LiteralStringSymbol: "#032f62",
		chroma.LiteralNumber:       "#0550ae",
		chroma.Operator:            "#0550ae",
		chroma.Comment:             "italic #57606a",
		chroma.Punctuation:         "#1f2328",
	})
})

// highlightCSS is the stylesheet for the token classes, generated once.
var highlightCSS = sync.OnceValue(func() []byte {
	var b bytes.Buffer
	f := chromahtml.New(chromahtml.WithClasses(true), chromahtml.WithCSSComments(false))
	if err := f.WriteCSS(&b, highlightStyle()); err != nil {
		// Only a failing writer errs, and a bytes.Buffer does not fail.
		panic(err)
	}
	return b.Bytes()
})
