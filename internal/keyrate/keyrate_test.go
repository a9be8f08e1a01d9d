package keyrate

import (
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestTake(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1000, 0)}
	b := New(0, c.now)
	r := Per(60, time.Minute, 3) // one a second, three at once
	for i := range 3 {
		if ok, _ := b.Take("k", r, 1); !ok {
			t.Fatalf("take %d of a full bucket of 3 refused", i+1)
		}
	}
	ok, wait := b.Take("k", r, 1)
	if ok || wait != time.Second {
		t.Fatalf("empty bucket: ok=%v wait=%v, want refused with 1s", ok, wait)
	}
	if ok, _ := b.Take("other", r, 1); !ok {
		t.Fatal("another key shares the bucket")
	}
	c.t = c.t.Add(-time.Hour) // a clock stepping back adds nothing
	if ok, _ := b.Take("k", r, 1); ok {
		t.Fatal("a clock step back refilled the bucket")
	}
	c.t = c.t.Add(time.Hour + 1500*time.Millisecond)
	if ok, _ := b.Take("k", r, 1); !ok {
		t.Fatal("1.5 s later the bucket holds no token")
	}
	if ok, wait := b.Take("k", r, 2); ok || wait != 1500*time.Millisecond {
		t.Fatalf("two tokens of 0.5: ok=%v wait=%v, want refused with 1.5s (all or none)", ok, wait)
	}
	if ok, wait := b.Take("k", r, 4); ok || wait <= 3*time.Second {
		t.Fatalf("more than the burst: ok=%v wait=%v", ok, wait)
	}
}

func TestShapeChangeCapsTokens(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1000, 0)}
	b := New(0, c.now)
	b.Take("k", Per(10, time.Second, 10), 1) // 9 left
	low := Per(1, time.Second, 2)
	for i := range 2 {
		if ok, _ := b.Take("k", low, 1); !ok {
			t.Fatalf("take %d under the lower burst refused", i+1)
		}
	}
	if ok, _ := b.Take("k", low, 1); ok {
		t.Fatal("a lower burst did not cap the tokens the bucket held")
	}
}

func TestKeysAreBounded(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1000, 0)}
	b := New(3, c.now)
	r := Per(1, time.Minute, 1)
	b.Take("used", r, 1)
	for _, k := range []string{"a", "b", "c", "d"} {
		c.t = c.t.Add(time.Millisecond)
		b.Take(k, r, 1)
		if b.Len() > 3 {
			t.Fatalf("%d keys held, bound 3", b.Len())
		}
	}
}
