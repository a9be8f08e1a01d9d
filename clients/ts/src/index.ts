// @roomrelay/localapi: a desktop app's client of the roomrelay agent.
export * from "./client.js";
export * from "./constants.js";
export * from "./discovery.js";
export * from "./errors.js";
export * from "./events.js";
export * from "./hash.js";
export * from "./oauth.js";
export * from "./provider.js";
export type * from "./types.js";
