// bearer-fetch.mjs — preload (node --import) used by conformance.sh only.
// The conformance suite's server scenarios build their SDK transport as
// `new StreamableHTTPClientTransport(new URL(url))` with no requestInit and
// have no header option, so they cannot authenticate. This wraps the global
// fetch to add `Authorization: Bearer $ROOMRELAY_MCP_TOKEN` to requests for
// the origin of $ROOMRELAY_MCP_URL (and nothing else).
const token = process.env.ROOMRELAY_MCP_TOKEN;
const origin = new URL(process.env.ROOMRELAY_MCP_URL).origin;
const realFetch = globalThis.fetch;
globalThis.fetch = function fetchWithBearer(input, init) {
  const url = input instanceof Request ? input.url : String(input);
  if (!token || new URL(url).origin !== origin) return realFetch(input, init);
  const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
  if (!headers.has("authorization")) headers.set("Authorization", `Bearer ${token}`);
  return realFetch(input, { ...init, headers });
};
