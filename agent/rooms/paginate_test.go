package rooms

import (
	"fmt"
	"testing"
)

// TestPaginationUnderConcurrentInserts pages through a Room while other
// goroutines add apps to it: every app that existed at the start is seen
// exactly once, and no app is seen twice.
func TestPaginationUnderConcurrentInserts(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	room := setupRoom(t, s, "p1")
	other := setupRoom(t, s, "p1") // apps in another room must not show up
	initial := map[string]bool{}
	for i := range 37 {
		initial[addSnippet(t, s, "p1", room, fmt.Sprintf("app %02d", i))] = true
	}

	for _, limit := range []int{1, 5, 50} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			seen := map[string]int{}
			cursor := ""
			pages := 0
			// A writer adds apps to this room and another one while the
			// first pages are read.
			stop := make(chan struct{})
			done := make(chan int, 1)
			go func(stop <-chan struct{}) {
				n := 0
				defer func() { done <- n }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					for _, r := range []string{room, other} {
						if _, err := s.AddApp(ctx, NewApp{ProjectID: "p1", RoomID: r, Name: "bg",
							Source: SourceRepo, RepositoryID: "r", VersionID: "v"}); err != nil {
							t.Error(err)
							return
						}
						n++
					}
				}
			}(stop)
			stopWriter := func() int {
				if stop != nil {
					close(stop)
					stop = nil
					return <-done
				}
				return -1
			}
			defer stopWriter()
			for {
				page, err := s.ListRoomApps(ctx, "p1", room, limit, cursor)
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Items) > limit {
					t.Fatalf("page of %d items, limit %d", len(page.Items), limit)
				}
				for _, it := range page.Items {
					seen[it.InstanceID]++
				}
				pages++
				// Between the first pages, two writers add apps at the same
				// time: one here, one in the other room.
				if pages <= 12 {
					addConcurrently(t, s, room, other, pages)
				} else if n := stopWriter(); n == 0 {
					t.Error("the background writer added nothing while pages were read")
				}
				if cursor = page.NextCursor; cursor == "" {
					break
				}
				if pages > 1000 {
					t.Fatal("pagination does not end")
				}
			}
			for id := range initial {
				if seen[id] != 1 {
					t.Errorf("initial app %s seen %d times", id, seen[id])
				}
			}
			for id, n := range seen {
				if n != 1 {
					t.Errorf("app %s seen %d times", id, n)
				}
			}
		})
	}
}

func addConcurrently(t *testing.T, s *Store, room, other string, n int) {
	t.Helper()
	errs := make(chan error, 2)
	for _, r := range []string{room, other} {
		go func() {
			_, err := s.AddApp(t.Context(), NewApp{ProjectID: "p1", RoomID: r, Name: fmt.Sprint("new ", n),
				Source: SourceRepo, RepositoryID: "r", VersionID: "v"})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
