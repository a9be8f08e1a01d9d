// Finding the running agent: the documented per-OS default endpoint, then
// the discovery file localapi.json the agent writes in its config dir.
import { readFile, stat } from "node:fs/promises";
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
  source: "option" | "default" | "file";
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
 * The documented default socket, or undefined where there is none to guess
 * (Windows: the pipe name carries the user's SID, so the file says it).
 */
export function defaultSocketPath(opts: DiscoverOptions = {}): string | undefined {
  const env = opts.env ?? process.env;
  const home = opts.home ?? env.ROOMRELAY_HOME;
  const platform = opts.platform ?? process.platform;
  if (platform === "win32") return undefined;
  if (home) return path.join(path.resolve(home), "state", "localapi.sock");
  const userHome = env.HOME || os.homedir();
  if (platform === "darwin") return path.join(userHome, "Library", "Application Support", "roomrelay", "run", "localapi.sock");
  if (env.XDG_RUNTIME_DIR && path.isAbsolute(env.XDG_RUNTIME_DIR)) return path.join(env.XDG_RUNTIME_DIR, "roomrelay", "localapi.sock");
  const state = env.XDG_STATE_HOME && path.isAbsolute(env.XDG_STATE_HOME) ? env.XDG_STATE_HOME : path.join(userHome, ".local", "state");
  return path.join(state, "roomrelay", "localapi.sock");
}

/** readDiscoveryFile reads localapi.json from the config dir. */
export async function readDiscoveryFile(opts: DiscoverOptions = {}): Promise<Endpoint> {
  const file = path.join(configDir(opts), "localapi.json");
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
    throw new RoomrelayError("no_discovery", `${file}: not JSON`, { cause: err });
  }
  if (typeof v.path !== "string" || v.path === "") throw new RoomrelayError("no_discovery", `${file}: no "path"`);
  return { ...v, transport: v.transport ?? "unix", path: v.path, source: "file" };
}

/**
 * discover finds the agent's endpoint: with a home, its discovery file
 * (a test or a second agent must never reach the user's default one); else
 * the documented default socket when it exists, then the discovery file.
 */
export async function discover(opts: DiscoverOptions = {}): Promise<Endpoint> {
  const env = opts.env ?? process.env;
  const home = opts.home ?? env.ROOMRELAY_HOME;
  if (home) {
    try {
      return await readDiscoveryFile(opts);
    } catch (err) {
      const def = defaultSocketPath(opts);
      if (def && (await isSocket(def))) return { transport: "unix", path: def, source: "default" };
      throw err;
    }
  }
  const def = defaultSocketPath(opts);
  if (def && (await isSocket(def))) return { transport: "unix", path: def, source: "default" };
  return readDiscoveryFile(opts);
}

async function isSocket(p: string): Promise<boolean> {
  try {
    return (await stat(p)).isSocket();
  } catch {
    return false;
  }
}
