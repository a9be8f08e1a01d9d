// The same runtime setting as cmd/roomrelay-agent, so the floor differs from
// the agent only by what the agent does, not by a GODEBUG default.
//go:debug updatemaxprocs=0

// Command floor is bench/idle's baseline: a bare Go program that holds one
// websocket with the agent's heartbeat (a ping every -heartbeat, pongs
// answered, a read deadline of 2.5 heartbeats) and does nothing else. Its
// wakeups are the least any Go agent holding such a connection can have;
// bench/idle measures it beside the agent in the same window.
//
//	floor -url ws://127.0.0.1:PORT/ -heartbeat 25s
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/gorilla/websocket"
)

func main() {
	url := flag.String("url", "", "websocket URL to hold")
	hb := flag.Duration("heartbeat", 25*time.Second, "ping interval")
	flag.Parse()
	conn, _, err := websocket.DefaultDialer.Dial(*url, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	wait := *hb * 5 / 2
	extend := func() { conn.SetReadDeadline(time.Now().Add(wait)) }
	extend()
	conn.SetPongHandler(func(string) error { extend(); return nil })
	conn.SetPingHandler(func(msg string) error {
		extend()
		return conn.WriteControl(websocket.PongMessage, []byte(msg), time.Now().Add(10*time.Second))
	})
	done := make(chan error, 1)
	go func() {
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				done <- err
				return
			}
			extend()
		}
	}()
	ping := time.NewTicker(*hb)
	defer ping.Stop()
	for {
		select {
		case err := <-done:
			fmt.Fprintln(os.Stderr, "floor: connection ended:", err)
			os.Exit(1)
		case <-ping.C:
			if err := conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(10*time.Second)); err != nil {
				fmt.Fprintln(os.Stderr, "floor:", err)
				os.Exit(1)
			}
		}
	}
}
