#!/usr/bin/env bash
# inspector.sh — tools/list through the pinned MCP Inspector CLI
# (@modelcontextprotocol/inspector-cli, the v1 Inspector's CLI mode), with the
# bearer header, and checks that the output names the 8 roomrelay tools.
#
# Env: ROOMRELAY_MCP_URL, ROOMRELAY_MCP_TOKEN.
#
# The CLI runs with its cwd in node_modules/: inspector-cli 1.0.3 checks
# fs.existsSync("../package.json") against the *cwd* but then imports that
# path relative to its own module, so it only finds its package.json when the
# cwd's parent has one (otherwise: "Cannot find module
# .../node_modules/@modelcontextprotocol/package.json").
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fail() { echo "inspector: FAIL: $*" >&2; exit 1; }

[[ -n "${ROOMRELAY_MCP_URL:-}" ]] || fail "environment variable ROOMRELAY_MCP_URL is not set"
[[ -n "${ROOMRELAY_MCP_TOKEN:-}" ]] || fail "environment variable ROOMRELAY_MCP_TOKEN is not set"
cli="$here/node_modules/.bin/mcp-inspector-cli"
[[ -x "$cli" ]] || fail "$cli missing: run 'npm ci' in $here"

out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

echo "inspector: tools/list against $ROOMRELAY_MCP_URL"
if ! (cd "$here/node_modules" && timeout 120 "$cli" --cli "$ROOMRELAY_MCP_URL" \
      --transport http --method tools/list \
      --header "Authorization: Bearer $ROOMRELAY_MCP_TOKEN") >"$out" 2>"$err"; then
  grep -v 'deprecated\|Upgrade:\|security fixes only\|^⚠\|^$' "$err" >&2 || true
  fail "Inspector CLI tools/list failed"
fi

missing=()
for t in list_local_rooms read_room list_room_apps read_room_app_status \
         propose_room_snippet_app propose_room_repo_app smoke_run_room_app wait_for_review; do
  grep -Eq "\"name\":[[:space:]]*\"$t\"" "$out" || missing+=("$t")
done
((${#missing[@]} == 0)) || { head -c 2000 "$out" >&2; fail "tools/list output does not name: ${missing[*]}"; }
echo "inspector: ok, all 8 tools listed"
