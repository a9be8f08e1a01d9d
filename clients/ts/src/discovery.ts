// Finding the running agent: the discovery file localapi.json the agent
// writes in its config dir once it listens (and removes when it stops), read
// afresh each time, since an agent restart changes its pid and boot id and
// may move the socket.
import { lstat, readFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { RoomrelayError } from "./errors.js";

/** The contents of localapi.json, and where the endpoint came from. */
export interface Endpoint {
  transport: "unix" | "npipe" | (string & {});
  /** The unix socket or the Windows pipe name: node:http's socketPath. */
  path: string;
  pid?: number;
  boot_id?: string;
  api?: string;
  version?: string;
  source: "option" | "file";
}

export interface DiscoverOptions {
  /** A roomrelay home (--home / ROOMRELAY_HOME): config, state and data below it. */
  home?: string;
  /** The environment to read ROOMRELAY_HOME and the XDG variables from (default process.env). */
  env?: NodeJS.ProcessEnv;
  platform?: NodeJS.Platform;
}

/** Where roomrelay keeps its config dir (localapi.json), as agent/device.ResolvePaths. */
export function configDir(opts: DiscoverOptions = {}): string {
  const env = opts.env ?? process.env;
  const home = opts.home ?? env.ROOMRELAY_HOME;
  if (home) return path.join(path.resolve(home), "config");
  const platform = opts.platform ?? process.platform;
  const userHome = env.HOME || os.homedir();
  if (platform === "win32") return path.join(env.APPDATA || path.join(userHome, "AppData", "Roaming"), "roomrelay");
  if (platform === "darwin") return path.join(userHome, "Library", "Application Support", "roomrelay");
  const xdg = env.XDG_CONFIG_HOME && path.isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : path.join(userHome, ".config");
  return path.join(xdg, "roomrelay");
}

/**
 * checkOwner refuses (code not_yours) a discovery file or socket that
 * belongs to another user, or a discovery file others may write: a stale
 * localapi.json may name a socket another user put there. Nothing to check
 * on Windows (the pipe name carries the user's SID; docs/localapi.md).
 */
async function checkOwner(what: "the discovery file" | "the socket", file: string): Promise<void> {
  if (typeof process.getuid !== "function") return;
  let st;
  try {
    st = await lstat(file);
  } catch {
    return; // missing: reading or connecting says so
  }
  const me = process.getuid();
  if (st.uid !== me) throw new RoomrelayError("not_yours", `${what} ${file} belongs to uid ${st.uid}, not to you (uid ${me}); not speaking to it (another user may have put it there)`);
  if (what === "the discovery file" && (!st.isFile() || (st.mode & 0o022) !== 0)) throw new RoomrelayError("not_yours", `${file} is not a regular file only you can write; not trusting it`);
}

/** readDiscoveryFile reads localapi.json from the config dir; not_yours when it or its socket is another user's. */
export async function readDiscoveryFile(opts: DiscoverOptions = {}): Promise<Endpoint> {
  const file = path.join(configDir(opts), "localapi.json");
  await checkOwner("the discovery file", file);
  let raw: string;
  try {
    raw = await readFile(file, "utf8");
  } catch (err) {
    throw new RoomrelayError("no_discovery", `no roomrelay agent found: ${file} is missing (is \`roomrelay run\` running?)`, { retryable: true, cause: err });
  }
  let v: Partial<Endpoint>;
  try {
    v = JSON.parse(raw) as Partial<Endpoint>;
  } catch (err) {
    // Retryable: an agent starting up may be writing it.
    throw new RoomrelayError("no_discovery", `${file}: not JSON`, { retryable: true, cause: err });
  }
  if (typeof v.path !== "string" || v.path === "") throw new RoomrelayError("no_discovery", `${file}: no "path"`);
  if ((v.transport ?? "unix") === "unix") await checkOwner("the socket", v.path);
  return { ...v, transport: v.transport ?? "unix", path: v.path, source: "file" };
}

/**
 * discover finds the agent's endpoint by reading its discovery file,
 * localapi.json in the config dir (with a home, `<home>/config/`). It never
 * guesses a socket path (docs/localapi.md: "do not guess"): the agent may
 * listen in the runtime dir, the state dir or a hashed temp path, and on
 * Windows the pipe name carries the user's SID; only the file says which.
 * A missing file is the agent not running (code no_discovery, retryable).
 */
export function discover(opts: DiscoverOptions = {}): Promise<Endpoint> {
  return readDiscoveryFile(opts);
}
