package review

import (
	. "github.com/alecthomas/chroma/v2" //nolint:revive // the rule tables read better unqualified
)

// The three languages a snippet holds, as chroma rule tables of our own:
// enough to colour keywords, strings, template literals, comments,
// numbers and JSX tags, built on first use. chroma's own lexers package is
// not imported: it parses ~250 definitions when any process that links it
// starts (~8 ms and ~370 KiB kept, GODEBUG=inittrace=1), and every
// roomrelay process, the device agent included, links this package.

var tsKeywords = Words(`\b`, `\b`, "abstract", "as", "async", "await", "break", "case", "catch",
	"continue", "debugger", "declare", "default", "delete", "do", "else", "extends", "finally",
	"for", "get", "if", "implements", "in", "instanceof", "keyof", "new", "of", "private", "protected", "public",
	"readonly", "return", "satisfies", "set", "static", "super", "switch", "this", "throw", "try", "typeof", "void",
	"while", "with", "yield")

// Declarations and the module words get classes of their own (kd, kr).
var tsDeclarations = Words(`\b`, `\b`, "class", "const", "enum", "function", "interface", "let", "namespace", "type", "var")

var tsModule = Words(`\b`, `\b`, "export", "from", "import")

var tsConstants = Words(`\b`, `\b`, "true", "false", "null", "undefined", "NaN", "Infinity")

var tsTypes = Words(`\b`, `\b`, "any", "boolean", "never", "number", "object", "string", "symbol", "unknown", "bigint")

func typescriptRules() Rules {
	return Rules{
		"root": {
			{Pattern: `\s+`, Type: TextWhitespace},
			{Pattern: `//[^\n]*`, Type: CommentSingle},
			{Pattern: `/\*[\s\S]*?\*/`, Type: CommentMultiline},
			{Pattern: "`", Type: LiteralStringBacktick, Mutator: Push("template")},
			{Pattern: `"(\\\\|\\[^\\]|[^"\\\n])*"`, Type: LiteralStringDouble},
			{Pattern: `'(\\\\|\\[^\\]|[^'\\\n])*'`, Type: LiteralStringSingle},
			// A JSX tag: <Name, </name, the closing > or />.
			{Pattern: `(</?)([A-Za-z][\w.:-]*)`, Type: ByGroups(Punctuation, NameTag)},
			{Pattern: `/?>`, Type: Punctuation},
			{Pattern: `0[xX][0-9a-fA-F_]+n?|0[bB][01_]+n?|0[oO][0-7_]+n?`, Type: LiteralNumberHex},
			{Pattern: `(\d[\d_]*\.?[\d_]*|\.\d[\d_]*)([eE][+-]?\d+)?n?`, Type: LiteralNumber},
			{Pattern: tsDeclarations, Type: KeywordDeclaration},
			{Pattern: tsModule, Type: KeywordReserved},
			{Pattern: tsKeywords, Type: Keyword},
			{Pattern: tsConstants, Type: KeywordConstant},
			{Pattern: tsTypes, Type: KeywordType},
			{Pattern: `[A-Za-z_$][\w$]*(?=\s*\()`, Type: NameFunction},
			{Pattern: `[A-Za-z_$][\w$]*(?==)`, Type: NameAttribute},
			{Pattern: `[A-Za-z_$][\w$]*`, Type: NameOther},
			{Pattern: `=>|[-+*/%&|^!~<>=?]=?|\?\?|\.\.\.`, Type: Operator},
			{Pattern: `[{}()\[\];,.:@#]`, Type: Punctuation},
			{Pattern: `.`, Type: Text},
		},
		"template": {
			{Pattern: "`", Type: LiteralStringBacktick, Mutator: Pop(1)},
			{Pattern: `\$\{`, Type: LiteralStringInterpol, Mutator: Push("interp")},
			{Pattern: "(\\\\[\\s\\S]|[^`\\\\$]|\\$[^{`])+", Type: LiteralStringBacktick},
			{Pattern: `\$`, Type: LiteralStringBacktick},
		},
		"interp": {
			{Pattern: `\}`, Type: LiteralStringInterpol, Mutator: Pop(1)},
			{Pattern: `\{`, Type: Punctuation, Mutator: Push("interp")},
			Include("root"),
		},
	}
}

func cssRules() Rules {
	return Rules{
		"root": {
			{Pattern: `\s+`, Type: TextWhitespace},
			{Pattern: `/\*[\s\S]*?\*/`, Type: CommentMultiline},
			{Pattern: `@[\w-]+`, Type: KeywordPseudo},
			{Pattern: `\{`, Type: Punctuation, Mutator: Push("block")},
			{Pattern: `[.#][\w-]+|::?[\w-]+`, Type: NameClass},
			{Pattern: `[\w-]+`, Type: NameTag},
			{Pattern: `"[^"\n]*"|'[^'\n]*'`, Type: LiteralString},
			{Pattern: `.`, Type: Punctuation},
		},
		"block": {
			{Pattern: `\s+`, Type: TextWhitespace},
			{Pattern: `/\*[\s\S]*?\*/`, Type: CommentMultiline},
			{Pattern: `\}`, Type: Punctuation, Mutator: Pop(1)},
			{Pattern: `\{`, Type: Punctuation, Mutator: Push("block")},
			{Pattern: `([\w-]+)(\s*)(:)`, Type: ByGroups(NameAttribute, TextWhitespace, Punctuation)},
			{Pattern: `#[0-9a-fA-F]{3,8}\b`, Type: LiteralNumberHex},
			{Pattern: `-?\d*\.?\d+(%|[a-zA-Z]+)?`, Type: LiteralNumber},
			{Pattern: `"[^"\n]*"|'[^'\n]*'`, Type: LiteralString},
			{Pattern: `!important\b`, Type: KeywordPseudo},
			{Pattern: `[\w-]+(?=\()`, Type: NameFunction},
			{Pattern: `[\w-]+`, Type: NameOther},
			{Pattern: `.`, Type: Punctuation},
		},
	}
}

func jsonRules() Rules {
	return Rules{
		"root": {
			{Pattern: `\s+`, Type: TextWhitespace},
			{Pattern: `"(\\\\|\\[^\\]|[^"\\])*"(?=\s*:)`, Type: NameTag},
			{Pattern: `"(\\\\|\\[^\\]|[^"\\])*"`, Type: LiteralStringDouble},
			{Pattern: `-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?`, Type: LiteralNumber},
			{Pattern: `\b(true|false|null)\b`, Type: KeywordConstant},
			{Pattern: `.`, Type: Punctuation},
		},
	}
}
