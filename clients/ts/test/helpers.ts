// Helpers of the suite against a real agent (agent.test.ts): the world the
// Go harness (e2e/tsclient_test.go) started, described by environment
// variables, and the admin's `roomrelay hub call` to play the cloud.
import { execFile } from "node:child_process";
import { setTimeout as delay } from "node:timers/promises";

export interface World {
  home: string; // the agent's ROOMRELAY_HOME
  bin: string; // the roomrelay binary
  hubHome: string; // the hub's ROOMRELAY_HOME (admin token)
  hubURL: string;
  deviceId: string;
  project: string;
  room: string;
  /** A room the desktop app (this suite's provider) owns; set when the agent runs with `provider app`. */
  appProject?: string;
}

/** world reads the harness's variables; undefined when the suite runs outside it (the tests skip). */
export function world(): World | undefined {
  const e = process.env;
  if (!e.ROOMRELAY_TS_AGENT_HOME) return undefined;
  const need = (k: string): string => {
    const v = e[k];
    if (!v) throw new Error(`${k} is not set (the Go harness e2e/tsclient_test.go sets it)`);
    return v;
  };
  return {
    home: need("ROOMRELAY_TS_AGENT_HOME"),
    bin: need("ROOMRELAY_TS_BIN"),
    hubHome: need("ROOMRELAY_TS_HUB_HOME"),
    hubURL: need("ROOMRELAY_TS_HUB_URL"),
    deviceId: need("ROOMRELAY_TS_DEVICE_ID"),
    project: need("ROOMRELAY_TS_PROJECT"),
    room: need("ROOMRELAY_TS_ROOM"),
    appProject: e.ROOMRELAY_TS_APP_PROJECT || undefined,
  };
}

export interface CommandResult {
  ok: boolean;
  result?: Record<string, unknown>;
  error?: { code: string; message: string; retryable?: boolean };
  [k: string]: unknown;
}

/** hubCall runs `roomrelay hub call` as the admin: the cloud's side of a command. */
export function hubCall(w: World, command: string, project: string, args: unknown, timeout = "20s"): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    execFile(
      w.bin,
      ["hub", "call", w.deviceId, command, "--project", project, "--args", JSON.stringify(args), "--hub", w.hubURL, "--timeout", timeout],
      { env: { ...process.env, ROOMRELAY_HOME: w.hubHome }, timeout: 60_000, maxBuffer: 4 << 20 },
      (err, stdout, stderr) => {
        const i = stdout.indexOf("{");
        if (i < 0) return reject(new Error(`hub call ${command}: ${err?.message ?? ""}\n${stderr}${stdout}`));
        try {
          resolve(JSON.parse(stdout.slice(i)) as CommandResult);
        } catch (e) {
          reject(new Error(`hub call ${command}: not JSON: ${stdout}\n${stderr} (${String(e)})`));
        }
      },
    );
  });
}

/** eventually polls fn until it returns a truthy value, for at most ms. */
export async function eventually<T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await delay(50);
  }
}

/** next reads an iterator until pred matches, for at most ms. */
export async function nextMatching<T>(it: AsyncIterator<T>, pred: (v: T) => boolean, ms = 15_000, seen?: T[]): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const left = end - Date.now();
    if (left <= 0) throw new Error("timed out waiting for a matching event");
    let timer: NodeJS.Timeout | undefined;
    const r = await Promise.race([
      it.next(),
      new Promise<never>((_, rej) => {
        timer = setTimeout(() => rej(new Error(`no matching event within ${ms} ms; seen: ${JSON.stringify(seen ?? []).slice(0, 2000)}`)), left);
      }),
    ]).finally(() => clearTimeout(timer));
    if (r.done) throw new Error("the event stream ended");
    seen?.push(r.value);
    if (pred(r.value)) return r.value;
  }
}
