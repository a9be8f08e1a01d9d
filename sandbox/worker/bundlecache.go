package worker

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
)

// A worker keeps the last few bundles it built, by the hash of their files,
// so a snippet smoke-run again (a retry, a re-review, the same snippet on
// another room) skips esbuild and goja's compile: on a small snippet they
// are about half of a warm run. Only the build's output is kept: a Bundle
// is immutable once built (its compiled *goja.Program is shared like the
// libraries' programs, its source map made once under a sync.Once), and
// every run still gets a fresh runtime, so a hit shares no JavaScript state
// with the run that built it. Failed builds are not kept.

const (
	bundleCacheEntries = 8
	// bundleCacheBytes bounds what the cache holds (files, code and CSS of
	// every entry); a bundle larger than a quarter of it is not kept.
	bundleCacheBytes = 4 << 20
)

type bundleKey [sha256.Size]byte

type cachedBundle struct {
	key   bundleKey
	b     *Bundle
	bytes int
}

// bundleCache is used by the worker's request loop only (one goroutine).
type bundleCache struct {
	entries []cachedBundle // most recently used last
	bytes   int
	hits    int
}

// filesKey hashes the snippet's paths and contents, each length-prefixed
// so that no two different file sets share an encoding.
func filesKey(files map[string]string) bundleKey {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	put := func(s string) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	for _, p := range paths {
		put(p)
		put(files[p])
	}
	var k bundleKey
	h.Sum(k[:0])
	return k
}

// build returns the cached bundle for files or builds (and compiles) it.
func (c *bundleCache) build(files map[string]string) (*Bundle, error) {
	k := filesKey(files)
	for i, e := range c.entries {
		if e.key == k {
			c.hits++
			c.entries = append(slices.Delete(c.entries, i, i+1), e)
			return e.b, nil
		}
	}
	b, err := Build(files)
	if err != nil {
		return nil, err
	}
	// Compiled here, so a hit skips goja's compile too; a compile error
	// is reported by the run's load step.
	_, _ = b.compile()
	size := len(b.Code) + len(b.CSS)
	for p, src := range b.files {
		size += len(p) + len(src)
	}
	if size > bundleCacheBytes/4 {
		return b, nil
	}
	for len(c.entries) > 0 && (len(c.entries) >= bundleCacheEntries || c.bytes+size > bundleCacheBytes) {
		c.bytes -= c.entries[0].bytes
		c.entries = slices.Delete(c.entries, 0, 1)
	}
	c.entries = append(c.entries, cachedBundle{key: k, b: b, bytes: size})
	c.bytes += size
	return b, nil
}
