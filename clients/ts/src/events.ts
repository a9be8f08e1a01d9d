// The event stream (GET /localapi/v1/events, one JSON object per line) as an
// async iterable that survives agent restarts: it reconnects with backoff,
// resumes with since=<last seq>, drops lines it already gave, and yields a
// resync event when it cannot know what it missed (the agent's ring moved
// past the point, the agent restarted, or seq jumped), after which the app
// reads status/projects/proposals afresh.
import type http from "node:http";
import type { LocalAPIClient } from "./client.js";
import { API_PREFIX } from "./client.js";
import { RoomrelayError, errorFromBody } from "./errors.js";
import type { AgentEvent } from "./types.js";

/** A line longer than this is an agent bug or not our agent: the stream fails. */
const MAX_LINE = 1 << 20;

export interface EventStreamOptions {
  /** Resume after this seq (the last one the app handled). */
  since?: number;
  /** The boot_id the app saw with since; a different one means the agent restarted. */
  bootId?: string;
  /** Only these types (the agent filters; resync and snapshot always come). */
  types?: string[];
  /** Ask for a snapshot line first. */
  initial?: boolean;
  /** Reconnect when the stream ends or the agent goes away (default true). */
  reconnect?: boolean;
  /** Yield the agent's keep-alive ping lines too (default false). */
  includePings?: boolean;
  /** Longest wait between reconnects (default 5 s). */
  maxBackoffMs?: number;
  signal?: AbortSignal;
}

export class EventStream implements AsyncIterable<AgentEvent> {
  private readonly abort = new AbortController();
  private res?: http.IncomingMessage;
  /** The last seq handed to the app, and its boot: where a reconnect resumes. */
  lastSeq?: number;
  bootId?: string;
  /** Connections made (the first plus reconnects). */
  connects = 0;

  constructor(
    private readonly client: LocalAPIClient,
    private readonly opts: EventStreamOptions,
  ) {
    this.lastSeq = opts.since;
    this.bootId = opts.bootId;
    opts.signal?.addEventListener("abort", () => this.close(), { once: true });
  }

  /** close ends the stream; a pending next() resolves done. */
  close(): void {
    this.abort.abort();
    this.res?.destroy();
  }

  get closed(): boolean {
    return this.abort.signal.aborted;
  }

  private path(first: boolean): string {
    const q = new URLSearchParams();
    if (this.lastSeq !== undefined) {
      q.set("since", String(this.lastSeq));
      // With the boot it belongs to, the agent itself says resync after a restart.
      if (this.bootId) q.set("boot_id", this.bootId);
    }
    if (this.opts.types?.length) q.set("types", this.opts.types.join(","));
    if (first && this.opts.initial) q.set("initial", "1");
    const s = q.toString();
    return `${API_PREFIX}/events${s ? "?" + s : ""}`;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<AgentEvent> {
    const reconnect = this.opts.reconnect ?? true;
    let backoff = 100;
    let first = true;
    while (!this.closed) {
      let res: http.IncomingMessage;
      try {
        res = await this.client.open("GET", this.path(first), { signal: this.abort.signal, timeoutMs: 30_000, headers: { Accept: "application/x-ndjson" } });
      } catch (err) {
        if (this.closed) return;
        if (!reconnect || !(err instanceof RoomrelayError && err.retryable)) throw err;
        await sleep(backoff, this.abort.signal);
        backoff = Math.min(backoff * 2, this.opts.maxBackoffMs ?? 5000);
        continue;
      }
      if ((res.statusCode ?? 0) >= 400) {
        const body = await collect(res);
        let parsed: unknown;
        try {
          parsed = JSON.parse(body);
        } catch {
          parsed = undefined;
        }
        const err = errorFromBody(res.statusCode ?? 0, parsed);
        if (!reconnect || !err.retryable) throw err;
        await sleep(backoff, this.abort.signal);
        continue;
      }
      this.res = res;
      this.connects++;
      first = false;
      backoff = 100;
      try {
        for await (const line of lines(res)) {
          let ev: AgentEvent;
          try {
            ev = JSON.parse(line) as AgentEvent;
          } catch {
            throw new RoomrelayError("bad_response", `events: a line that is not JSON: ${line.slice(0, 80)}`);
          }
          for (const out of this.accept(ev)) yield out;
        }
      } catch (err) {
        if (this.closed) return;
        if (err instanceof RoomrelayError && err.code === "bad_response") throw err;
        // The agent went away mid-stream: reconnect below.
      } finally {
        this.res = undefined;
      }
      if (!reconnect || this.closed) return;
      await sleep(backoff, this.abort.signal);
      backoff = Math.min(backoff * 2, this.opts.maxBackoffMs ?? 5000);
    }
  }

  /** accept turns one received line into what the app sees: deduped, with a resync where needed. */
  private *accept(ev: AgentEvent): Generator<AgentEvent> {
    if (ev.type === "ping") {
      if (this.opts.includePings) yield ev;
      return;
    }
    if (ev.type === "resync" || ev.type === "snapshot") {
      this.bootId = ev.boot_id;
      this.lastSeq = ev.seq;
      yield ev;
      return;
    }
    if (this.bootId !== undefined && ev.boot_id !== this.bootId) {
      const previous = this.bootId;
      this.bootId = ev.boot_id;
      this.lastSeq = ev.seq;
      yield { seq: ev.seq, boot_id: ev.boot_id, time: ev.time, type: "resync", data: { reason: "agent_restarted", previous_boot_id: previous, synthesized: true } };
      yield ev;
      return;
    }
    this.bootId = ev.boot_id;
    if (this.lastSeq !== undefined) {
      if (ev.seq <= this.lastSeq) return; // given already (a resume overlaps)
      // With a types filter the agent skips the other types' seqs: no gap then.
      if (ev.seq > this.lastSeq + 1 && !this.opts.types?.length) {
        const from = this.lastSeq;
        this.lastSeq = ev.seq;
        yield { seq: ev.seq, boot_id: ev.boot_id, time: ev.time, type: "resync", data: { reason: "gap", after: from, synthesized: true } };
        yield ev;
        return;
      }
    }
    this.lastSeq = ev.seq;
    yield ev;
  }
}

async function* lines(res: http.IncomingMessage): AsyncGenerator<string> {
  let buf = "";
  res.setEncoding("utf8");
  for await (const chunk of res as AsyncIterable<string>) {
    buf += chunk;
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (line) yield line;
    }
    if (buf.length > MAX_LINE) throw new RoomrelayError("bad_response", `events: a line over ${MAX_LINE} bytes`);
  }
  if (buf.trim()) yield buf.trim();
}

function collect(res: http.IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let s = "";
    res.setEncoding("utf8");
    res.on("data", (c: string) => {
      if (s.length < 65536) s += c;
    });
    res.on("end", () => resolve(s));
    res.on("error", () => resolve(s));
  });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
