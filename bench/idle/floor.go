package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/gorilla/websocket"
)

// floorServer is the hub side of the floor's connection, in the bench
// process (not measured): it pings every heartbeat as the hub does and
// drops a client silent for 2.5 heartbeats.
func floorServer(hb time.Duration) (url string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	up := websocket.Upgrader{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		extend := func() { conn.SetReadDeadline(time.Now().Add(hb * 5 / 2)) }
		extend()
		conn.SetPongHandler(func(string) error { extend(); return nil })
		go func() {
			t := time.NewTicker(hb)
			defer t.Stop()
			for {
				select {
				case <-r.Context().Done():
					return
				case <-t.C:
					if conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(10*time.Second)) != nil {
						return
					}
				}
			}
		}()
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
			extend()
		}
	})}
	go srv.Serve(l)
	return "ws://" + l.Addr().String() + "/", func() { srv.Close() }, nil
}

// startFloor runs bin (bench/idle/floor, built beside the agent) against
// a floorServer; the settle time before each window covers its dial.
func startFloor(ctx context.Context, dir, bin string, hb time.Duration) (*proc, func(), error) {
	url, stopSrv, err := floorServer(hb)
	if err != nil {
		return nil, nil, err
	}
	p, err := start(ctx, bin, filepath.Join(dir, "floor.log"), "-url", url, "-heartbeat", hb.String())
	if err != nil {
		stopSrv()
		return nil, nil, fmt.Errorf("floor: %w", err)
	}
	return p, func() { p.stop(); stopSrv() }, nil
}
