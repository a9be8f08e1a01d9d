#!/usr/bin/env node
// The desktop app of BenchmarkProviderReadRoom (e2e/provider_bench_test.go):
// the TypeScript client's Provider (clients/ts, compiled to dist/ by the
// harness) on the given socket, answering rooms.read for one room. It says
// "ready" once registered and quits when stdin closes.
//
//   node provider-app.mjs SOCKET ROOM PROJECT
import { Provider } from "../../clients/ts/dist/src/index.js";

const [socketPath, room, project] = process.argv.slice(2);
const provider = new Provider({
  socketPath,
  app: { name: "bench-app", version: "1" },
  handlers: {
    roomsRead({ room_id }) {
      return { id: room_id, name: "Node room", app_count: 0 };
    },
  },
  rooms: [{ id: room, project, name: "Node room" }],
});
provider.on("connected", () => process.stdout.write("ready\n"));
provider.on("error", (err) => process.stderr.write(`provider: ${err.message}\n`));
await provider.start();
process.stdin.on("end", () => void provider.close().then(() => process.exit(0)));
process.stdin.resume();
