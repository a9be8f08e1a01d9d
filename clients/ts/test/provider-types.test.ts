// src/provider.ts's message types against docs/provider-protocol.schema.json
// (which agent/provider TestSchemaMatchesGoTypes checks against the Go
// types roomrelay sends and reads), field by field, nested inline objects
// included: what the app sends must require what the schema requires; what
// it reads may be looser, but must not count on what the schema leaves out.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";
import ts from "typescript";

// dist/test/provider-types.test.js -> the package root and the repository
const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const schemaFile = path.join(pkg, "..", "..", "docs", "provider-protocol.schema.json");

type Schema = { properties?: Record<string, Schema>; required?: string[]; allOf?: Schema[]; $ref?: string; items?: Schema };

// Each interface of provider.ts, where its schema is ($defs, then keys), and
// who writes it: "app" (the app answers or notifies) or "roomrelay".
const shapes: Record<string, { at: string[]; writer: "app" | "roomrelay" }> = {
  ProviderRoom: { at: ["rooms.changed", "params", "properties", "rooms", "items"], writer: "app" },
  RequestBase: { at: ["call"], writer: "roomrelay" },
  RoomRef: { at: ["rooms.read", "params"], writer: "roomrelay" },
  RoomsReadResult: { at: ["rooms.read", "result"], writer: "app" },
  AppsListParams: { at: ["apps.list", "params"], writer: "roomrelay" },
  Launcher: { at: ["launcher"], writer: "app" },
  ProviderApp: { at: ["app"], writer: "app" },
  AppsListResult: { at: ["apps.list", "result"], writer: "app" },
  AppRef: { at: ["apps.status", "params"], writer: "roomrelay" },
  BuildState: { at: ["apps.status", "result", "properties", "build"], writer: "app" },
  AppsStatusResult: { at: ["apps.status", "result"], writer: "app" },
  AppsFilesResult: { at: ["apps.files", "result"], writer: "app" },
  AppsInstallParams: { at: ["apps.install", "params"], writer: "roomrelay" },
  AppsInstallResult: { at: ["apps.install", "result"], writer: "app" },
  SetBuildStateParams: { at: ["apps.set_build_state", "params"], writer: "roomrelay" },
  HelloResult: { at: ["provider.hello", "result"], writer: "roomrelay" },
};

test("provider.ts's message types match provider-protocol.schema.json, nested objects included", () => {
  const doc = JSON.parse(readFileSync(schemaFile, "utf8")) as { $defs: Record<string, Schema> };
  const resolve = (s: Schema): Schema => (s.$ref ? doc.$defs[s.$ref.replace("#/$defs/", "")] : s);
  // properties → required, through allOf parts and references.
  const schemaFields = (s: Schema, out = new Map<string, { req: boolean; s: Schema }>()) => {
    s = resolve(s);
    for (const part of s.allOf ?? []) schemaFields(part, out);
    for (const [k, v] of Object.entries(s.properties ?? {})) out.set(k, { req: out.get(k)?.req ?? false, s: v });
    for (const k of s.required ?? []) if (out.has(k)) out.get(k)!.req = true;
    return out;
  };

  const file = path.join(pkg, "src", "provider.ts");
  const sf = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true);
  const decls = new Map<string, ts.InterfaceDeclaration>();
  sf.forEachChild((n) => {
    if (ts.isInterfaceDeclaration(n)) decls.set(n.name.text, n);
  });
  type Field = { req: boolean; type?: ts.TypeNode };
  const members = (ms: readonly ts.TypeElement[], out: Map<string, Field>) => {
    for (const m of ms) {
      if (ts.isPropertySignature(m) && m.name) out.set(m.name.getText(sf).replace(/^"|"$/g, ""), { req: !m.questionToken, type: m.type });
    }
  };
  const tsFields = (name: string, out = new Map<string, Field>()): Map<string, Field> => {
    const d = decls.get(name);
    assert.ok(d, `provider.ts has no interface ${name}`);
    for (const h of d.heritageClauses ?? []) for (const e of h.types) tsFields(e.expression.getText(sf), out);
    members(d.members, out);
    return out;
  };

  const drift: string[] = [];
  const compare = (where: string, t: Map<string, Field>, s: Schema, writer: "app" | "roomrelay") => {
    const d = schemaFields(s);
    for (const k of d.keys()) if (!t.has(k)) drift.push(`${where} lacks ${k}`);
    for (const [k, f] of t) {
      const p = d.get(k);
      if (!p) {
        drift.push(`${where} has ${k}, which the schema does not define`);
        continue;
      }
      if (writer === "app" && p.req !== f.req) drift.push(`${where}.${k}: ${p.req ? "required" : "optional"} in the schema, not in provider.ts`);
      if (writer === "roomrelay" && f.req && !p.req) drift.push(`${where}.${k}: optional in the schema, required in provider.ts`);
      if (f.type && ts.isTypeLiteralNode(f.type)) {
        const inner = new Map<string, Field>();
        members(f.type.members, inner);
        compare(`${where}.${k}`, inner, p.s, writer);
      }
    }
  };
  for (const [name, { at, writer }] of Object.entries(shapes)) {
    let s: unknown = doc.$defs[at[0]];
    for (const k of at.slice(1)) s = (s as Record<string, unknown>)?.[k];
    assert.ok(s, `the schema has no ${at.join(" ")}`);
    compare(name, tsFields(name), s as Schema, writer);
  }
  assert.deepEqual(drift, [], "provider.ts drifted from provider-protocol.schema.json");
});
