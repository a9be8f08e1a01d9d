package hubcmd

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/cli"
	"github.com/roomrelay/roomrelay/internal/testutil"
)

// TestAdminCommandsFindTheHubByHome: a hub on a port other than the
// default writes its URL beside its admin token, and an admin command with
// the same --home reaches it without --hub.
func TestAdminCommandsFindTheHubByHome(t *testing.T) {
	home := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var hubErr testutil.SyncBuffer // the hub's logger and its banner write from several goroutines
	go func() {
		e := &cli.Env{Stdout: &testutil.SyncBuffer{}, Stderr: &hubErr, Getenv: func(string) string { return "" }}
		done <- cli.Main(ctx, []string{"hub", "--home", home, "--listen", addr}, e)
	}()
	defer func() { cancel(); <-done }()
	testutil.Eventually(t, "the hub wrote its URL", func() bool {
		return strings.Contains(readFile(filepath.Join(home, "data", "hub", "hub-url")), addr)
	})
	code, out, errs := run(t, nil, "hub", "devices", "--home", home)
	if code != 0 {
		t.Fatalf("hub devices --home: %d %s %s\nhub: %s", code, out, errs, hubErr.String())
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
