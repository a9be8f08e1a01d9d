//go:build linux

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

const (
	adminToken = "rra_cluster-test-admin-token-0123456789abcdef"
	heartbeat  = "1s" // presence and dead-socket detection in seconds, not minutes
	project    = "proj-cluster"
)

// natsNode is one nats-server of the cluster: client, route and monitoring
// ports and its JetStream store survive a restart.
type natsNode struct {
	*child
	name                string
	port, route, mon    int
	storeDir            string
	clientURL, monitorU string
}

// hubNode is one `roomrelay hub` process on the cluster.
type hubNode struct {
	*child
	name    string
	addr    string
	dataDir string
	cl      *hubclient.Client
}

func (h *hubNode) url() string { return "http://" + h.addr }

// cluster is three NATS nodes, three hubs (A and B behind the balancer for
// agents, C for callers, so every command crosses nodes) and their agents.
type cluster struct {
	t    *testing.T
	p    *procs
	nats []*natsNode
	hubs []*hubNode
	lb   *balancer
	http *http.Client
}

// natsStorePerServer is each NATS server's max_file_store.
const natsStorePerServer = "1GB"

// newCluster starts the NATS nodes and waits until each is healthy; the
// hubs are set up, not started.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t, p: newProcs(t), http: &http.Client{Timeout: 5 * time.Second}}
	ports := freePorts(t, 12)
	for i := range 3 {
		n := &natsNode{name: "n" + strconv.Itoa(i+1), port: ports[3*i], route: ports[3*i+1], mon: ports[3*i+2],
			storeDir: filepath.Join(c.p.dir, "nats"+strconv.Itoa(i+1))}
		n.clientURL = fmt.Sprintf("nats://127.0.0.1:%d", n.port)
		n.monitorU = fmt.Sprintf("http://127.0.0.1:%d", n.mon)
		c.nats = append(c.nats, n)
	}
	var urls []string
	for i, n := range c.nats {
		var routes []string
		for j, o := range c.nats {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", o.route))
			}
		}
		// Each server's JetStream store is 1 GB, a common setting: what
		// the hub reserves at R3 must fit in it (#24 part 10).
		conf := filepath.Join(c.p.dir, n.name+".conf")
		if err := os.WriteFile(conf, fmt.Appendf(nil, "jetstream {\n  store_dir: %q\n  max_file_store: %s\n}\n", n.storeDir, natsStorePerServer), 0o600); err != nil {
			t.Fatal(err)
		}
		n.child = c.p.add("nats-"+n.name, natsBin, c.p.dir, "-c", conf,
			"-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-m", strconv.Itoa(n.mon),
			"-n", n.name, "--cluster_name", "rr",
			"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", n.route), "--routes", strings.Join(routes, ","))
		urls = append(urls, n.clientURL)
	}
	tokFile := filepath.Join(c.p.dir, "admin-token")
	if err := os.WriteFile(tokFile, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// One public URL for every node (hub-a's): one OAuth issuer and MCP
	// resource, as behind a balancer.
	publicURL := "http://127.0.0.1:" + strconv.Itoa(ports[9])
	for i, name := range []string{"hub-a", "hub-b", "hub-c"} {
		h := &hubNode{name: name, addr: "127.0.0.1:" + strconv.Itoa(ports[9+i]), dataDir: filepath.Join(c.p.dir, name)}
		h.cl = hubclient.New(h.url(), adminToken)
		h.cl.HTTP = &http.Client{Timeout: 60 * time.Second}
		h.child = c.p.add(name, relayBin, h.dataDir, "hub", "--listen", h.addr, "--data-dir", h.dataDir,
			"--nats", strings.Join(urls, ","), "--replicas", "3", "--startup-timeout", "90s",
			"--node", name, "--admin-token-file", tokFile, "--heartbeat", heartbeat, "--public-url", publicURL)
		c.hubs = append(c.hubs, h)
	}
	c.lb = newBalancer(t, c.hubs[0].addr, c.hubs[1].addr)
	for _, n := range c.nats {
		n.start(t)
	}
	for _, n := range c.nats {
		c.waitNATS(n, 30*time.Second)
	}
	return c
}

// startHubs starts the hubs one at a time: hubs starting together on a
// fresh cluster is TestConcurrentStart's case, and a failure there should
// not hide every other scenario.
func (c *cluster) startHubs() {
	c.t.Helper()
	for _, h := range c.hubs {
		h.start(c.t)
		c.waitHubReady(h, 60*time.Second, "cluster start")
	}
}

func (c *cluster) hubByName(name string) *hubNode {
	for _, h := range c.hubs {
		if h.name == name {
			return h
		}
	}
	return nil
}

// waitNATS waits until the node's JetStream is current (/healthz 200).
func (c *cluster) waitNATS(n *natsNode, within time.Duration) {
	c.t.Helper()
	poll(c.t, within, "nats-server "+n.name+" healthy", func() (bool, string) {
		if !n.running() {
			return false, "exited"
		}
		code, body := c.get(n.monitorU + "/healthz")
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
}

// metaLeader is the JetStream meta leader's node name, as a node reports it.
func (c *cluster) metaLeader() string {
	for _, n := range c.nats {
		if !n.running() {
			continue
		}
		_, body := c.get(n.monitorU + "/jsz")
		var jsz struct {
			Meta struct {
				Leader string `json:"leader"`
			} `json:"meta_cluster"`
		}
		if json.Unmarshal([]byte(body), &jsz) == nil && jsz.Meta.Leader != "" {
			return jsz.Meta.Leader
		}
	}
	return ""
}

func (c *cluster) get(url string) (int, string) {
	resp, err := c.http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// readyz is a hub's GET /v1/readyz.
func (c *cluster) readyz(h *hubNode) (int, string) { return c.get(h.url() + "/v1/readyz") }

// waitHubsReady waits until every running hub answers readyz 200.
func (c *cluster) waitHubsReady(within time.Duration, after string) {
	c.t.Helper()
	for _, h := range c.hubs {
		c.waitHubReady(h, within, after)
	}
}

func (c *cluster) waitHubReady(h *hubNode, within time.Duration, after string) {
	c.t.Helper()
	poll(c.t, within, after+": "+h.name+" readyz 200", func() (bool, string) {
		if !h.running() {
			return false, "the hub process exited"
		}
		code, body := c.readyz(h)
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
}

// agentDev is a real `roomrelay run` process with its own home.
type agentDev struct {
	*child
	home  string
	id    string
	rooms []string
}

// addAgent pairs on pairOn, enrolls through hubURL (the balancer: the
// enrollment lands on another node than the pairing), creates rooms,
// enables the project and starts the agent.
func (c *cluster) addAgent(name string, pairOn *hubNode, hubURL string, rooms ...string) *agentDev {
	c.t.Helper()
	a := &agentDev{home: filepath.Join(c.p.dir, name), rooms: rooms}
	pc, err := pairOn.cl.Pair(context.Background(), project, 0)
	if err != nil {
		c.t.Fatalf("pair on %s: %v", pairOn.name, err)
	}
	code, out := runRelay(c.t, a.home, "enroll", "--home", a.home, "--hub", hubURL, "--code", pc.Code,
		"--name", name, "--credential-store", "file", "--json")
	var en struct {
		DeviceID string `json:"device_id"`
	}
	if i := strings.Index(out, "{"); i >= 0 {
		_ = json.Unmarshal([]byte(out[i:]), &en)
	}
	if code != 0 || en.DeviceID == "" {
		c.t.Fatalf("enroll %s through %s (code paired on %s): exit %d: %s", name, hubURL, pairOn.name, code, out)
	}
	a.id = en.DeviceID
	for _, r := range rooms {
		if code, out := runRelay(c.t, a.home, "rooms", "create", "--home", a.home, "--project", project, "--name", "Room "+r, "--id", r); code != 0 {
			c.t.Fatalf("rooms create %s: %d %s", r, code, out)
		}
	}
	if code, out := runRelay(c.t, a.home, "enable", project, "--home", a.home,
		"--allow", "read_room,list_room_apps,propose_room_snippet_app"); code != 0 {
		c.t.Fatalf("enable: %d %s", code, out)
	}
	a.child = c.p.add("agent-"+name, relayBin, a.home, "run", "--home", a.home, "--no-sandbox")
	a.start(c.t)
	return a
}

// device reads a device through hub h.
func (c *cluster) device(h *hubNode, id string) (*hubapi.Device, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.cl.Device(ctx, id)
}

// waitOnline waits until h shows the device online on one of the nodes in
// on (any node when empty) and returns its record.
func (c *cluster) waitOnline(h *hubNode, id string, within time.Duration, what string, on ...string) *hubapi.Device {
	c.t.Helper()
	var d *hubapi.Device
	poll(c.t, within, what, func() (bool, string) {
		var err error
		if d, err = c.device(h, id); err != nil {
			return false, err.Error()
		}
		p := d.Presence
		if p.State != hubapi.StateOnline {
			return false, "presence " + p.State + " on " + p.Node
		}
		if len(on) > 0 && !contains(on, p.Node) {
			return false, "online on " + p.Node + ", want one of " + strings.Join(on, ",")
		}
		return true, ""
	})
	return d
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// call sends a command through h and returns its result (a transport
// failure is an internal error result, so callers report one thing).
func (c *cluster) call(h *hubNode, dev, name string, args any, timeout time.Duration) (*relay.Result, int) {
	raw, _ := json.Marshal(args)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+15*time.Second)
	defer cancel()
	res, status, err := h.cl.Command(ctx, dev, hubapi.CommandRequest{ProjectID: project, Name: name, Args: raw, TimeoutMS: timeout.Milliseconds()})
	if err != nil {
		return &relay.Result{Error: relay.Errorf(relay.CodeInternal, "transport: %v", err)}, status
	}
	return res, status
}

// readRoom asserts a read_room of room through h comes back from the device.
func (c *cluster) readRoom(h *hubNode, a *agentDev, room, fault string) {
	c.t.Helper()
	res, status := c.call(h, a.id, relay.CmdReadRoom, map[string]string{"room_id": room}, 10*time.Second)
	if !res.OK || !strings.Contains(string(res.Result), room) {
		c.t.Fatalf("%s: read_room %s through %s: status %d ok=%v error=%v result=%s", fault, room, h.name, status, res.OK, res.Error, res.Result)
	}
}

// rawDevice is a device enrolled over the API whose socket the test holds
// itself: the real hello/welcome, pings answered while reading.
type rawDevice struct {
	id, token string
	mu        sync.Mutex
	conn      *websocket.Conn
	ended     chan struct{}
}

// enrollRaw pairs on pairOn and enrolls on enrollOn.
func (c *cluster) enrollRaw(pairOn, enrollOn *hubNode) (*rawDevice, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, err := pairOn.cl.Pair(ctx, project, 0)
	if err != nil {
		return nil, fmt.Errorf("pair on %s: %w", pairOn.name, err)
	}
	en, err := enrollOn.cl.Enroll(ctx, pc.Code, "raw-device", "linux", "")
	if err != nil {
		return nil, fmt.Errorf("enroll on %s (paired on %s): %w", enrollOn.name, pairOn.name, err)
	}
	return &rawDevice{id: en.DeviceID, token: en.Token}, nil
}

// connect dials hubAddr with the device's token and waits for welcome.
func (d *rawDevice) connect(t testing.TB, hubAddr string) error {
	dl := websocket.Dialer{Subprotocols: []string{relay.Subprotocol}, HandshakeTimeout: 10 * time.Second}
	conn, resp, err := dl.Dial("ws://"+hubAddr+relay.ConnectPath, http.Header{"Authorization": {"Bearer " + d.token}})
	if err != nil {
		if resp != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return fmt.Errorf("dial: %w: %s %s", err, resp.Status, bytes.TrimSpace(body))
		}
		return fmt.Errorf("dial: %w", err)
	}
	hello, _ := relay.Encode(&relay.Hello{Protocol: relay.ProtocolVersion, AgentVersion: "cluster-test", DeviceID: d.id, OS: "linux",
		Policy: []relay.ProjectPolicy{}, Rooms: []relay.RoomEntry{}})
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	if err := conn.WriteMessage(websocket.TextMessage, hello); err != nil {
		conn.Close()
		return fmt.Errorf("hello: %w", err)
	}
	_, data, err := conn.ReadMessage()
	if err != nil {
		conn.Close()
		return fmt.Errorf("read welcome: %w", err)
	}
	if f, err := relay.Decode(data, 0); err != nil || f.FrameType() != relay.TypeWelcome {
		conn.Close()
		return fmt.Errorf("first frame is not welcome: %.200s", data)
	}
	_ = conn.SetReadDeadline(time.Time{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	d.mu.Lock()
	d.conn, d.ended = conn, ended
	d.mu.Unlock()
	t.Cleanup(d.close)
	return nil
}

func (d *rawDevice) close() {
	d.mu.Lock()
	conn := d.conn
	d.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
}
