package relay

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strconv"
)

// SnippetKey is the content-derived idempotency key of a snippet proposal:
// "snip-" + hex(sha256(snippet(roomID, name, files)))[:32]. A retry carries
// the same key; a deliberate change to the files gives a new key and so a
// new review card (the seed).
//
// The canonical encoding is a sequence of netstrings: a string s is written
// as its length in bytes in ASCII decimal (no sign, no leading zeros, "0" for
// the empty string), a colon, the bytes of s, and a comma:
//
//	ns("hello") = "5:hello,"    ns("") = "0:,"
//
// Strings are taken as UTF-8 exactly as they arrive, with no normalization.
// A number n is written as ns(decimal n). A file set is
//
//	files(F) = ns(len(F)) followed by ns(path) ns(content) for each file,
//	           in ascending byte order of the paths' UTF-8 (a plain byte-wise
//	           sort; note that JavaScript's default sort compares UTF-16 code
//	           units and differs from it above U+FFFF)
//
// and the three encodings are
//
//	snippet(room, name, F)     = ns("roomrelay-snippet-v1") ns(room) ns(name) files(F)
//	content(F)                 = ns("roomrelay-files-v1") files(F)
//	repo(room, name, repo, v)  = ns("roomrelay-repo-v1") ns(room) ns(name) ns(repo) ns(v)
//
// Because every string carries its length the encoding is unambiguous, and
// the leading tag keeps the three kinds (and later versions) apart. For
// example, room "r1", name "Timer", files {"src/App.tsx": "x"} encode as
//
//	20:roomrelay-snippet-v1,2:r1,5:Timer,1:1,11:src/App.tsx,1:x,
//
// Keys are "snip-" or "repo-" followed by the first 32 lowercase hex digits
// (128 bits) of the SHA-256 of the encoding; the content hash is the full 64.
func SnippetKey(roomID, name string, files map[string]string) string {
	sum := sha256.Sum256(CanonicalSnippet(roomID, name, files))
	return "snip-" + hex.EncodeToString(sum[:])[:32]
}

// RepoKey is the idempotency key of a repository proposal:
// "repo-" + hex(sha256(repo(roomID, name, repositoryID, versionID)))[:32].
func RepoKey(roomID, name, repositoryID, versionID string) string {
	b := netstring(nil, "roomrelay-repo-v1")
	for _, s := range []string{roomID, name, repositoryID, versionID} {
		b = netstring(b, s)
	}
	sum := sha256.Sum256(b)
	return "repo-" + hex.EncodeToString(sum[:])[:32]
}

// ContentHash is the full SHA-256, in lowercase hex, of content(files): what
// the owner's approval is bound to, so that approval of one set of files can
// never create an app from another.
func ContentHash(files map[string]string) string {
	sum := sha256.Sum256(appendFiles(netstring(nil, "roomrelay-files-v1"), files))
	return hex.EncodeToString(sum[:])
}

// CanonicalSnippet returns snippet(roomID, name, files), the bytes SnippetKey
// hashes, for clients and tests that want to compare encodings.
func CanonicalSnippet(roomID, name string, files map[string]string) []byte {
	b := netstring(nil, "roomrelay-snippet-v1")
	b = netstring(b, roomID)
	b = netstring(b, name)
	return appendFiles(b, files)
}

func appendFiles(b []byte, files map[string]string) []byte {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths) // Go compares strings byte-wise
	b = netstring(b, strconv.Itoa(len(files)))
	for _, p := range paths {
		b = netstring(b, p)
		b = netstring(b, files[p])
	}
	return b
}

func netstring(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	b = append(b, s...)
	return append(b, ',')
}
