// types.ts against openapi.json, field by field: the Go types are the
// contract's source, openapi.json is checked against them by Go
// (agent/localapi TestComponentsMatchGoTypes), and this test checks the TS
// copy against openapi.json, so none of the three copies can drift.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";
import ts from "typescript";

// dist/test/types.test.js -> the package root and the repository
const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const openapi = path.join(pkg, "..", "..", "agent", "localapi", "openapi.json");

// Each interface of types.ts and the component schema it copies.
const components: Record<string, string> = {
  ProviderState: "ProviderState",
  Status: "Status",
  RateInfo: "Rate",
  ProjectView: "Project",
  ProjectsResponse: "ProjectsResponse",
  ProjectSpec: "ProjectSpec",
  EnableRequest: "EnableRequest",
  ProjectResponse: "ProjectResponse",
  Proposal: "Proposal",
  HiddenReport: "HiddenReport",
  ProposalFile: "ProposalFile",
  ProposalDetail: "ProposalDetail",
  CheckResponse: "CheckResponse",
  DecisionResponse: "DecisionResponse",
  AuditOutcome: "AuditOutcome",
  Snapshot: "Snapshot",
  AgentEvent: "Event",
  ProposalCreatedData: "ProposalCreatedData",
  ProposalDecidedData: "ProposalDecidedData",
  InstallChangedData: "InstallChangedData",
  BuildStateData: "BuildStateData",
  ProviderChangedData: "ProviderChangedData",
  CommandRanData: "CommandRanData",
};

type Schema = { properties?: Record<string, unknown>; required?: string[]; allOf?: ({ $ref?: string } & Schema)[] };

// fields of a component: property → required, through allOf references.
function docFields(schemas: Record<string, Schema>, name: string, out = new Map<string, boolean>()): Map<string, boolean> {
  const s = schemas[name];
  assert.ok(s, `openapi.json has no component ${name}`);
  const own = (p: Schema) => {
    for (const k of Object.keys(p.properties ?? {})) if (!out.has(k)) out.set(k, false);
    for (const k of p.required ?? []) out.set(k, true);
  };
  for (const part of s.allOf ?? []) {
    if (part.$ref) docFields(schemas, part.$ref.replace("#/components/schemas/", ""), out);
    else own(part);
  }
  own(s);
  return out;
}

// fields of each interface of types.ts: property → required (not "?"),
// with what it extends.
function tsInterfaces(): Map<string, Map<string, boolean>> {
  const file = path.join(pkg, "src", "types.ts");
  const sf = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true);
  const decls = new Map<string, ts.InterfaceDeclaration>();
  sf.forEachChild((n) => {
    if (ts.isInterfaceDeclaration(n)) decls.set(n.name.text, n);
  });
  const fields = (name: string, out = new Map<string, boolean>()): Map<string, boolean> => {
    const d = decls.get(name);
    assert.ok(d, `types.ts has no interface ${name}`);
    for (const h of d.heritageClauses ?? []) for (const e of h.types) fields(e.expression.getText(sf), out);
    for (const m of d.members) {
      if (ts.isPropertySignature(m) && m.name) out.set(m.name.getText(sf).replace(/^"|"$/g, ""), !m.questionToken);
    }
    return out;
  };
  const all = new Map<string, Map<string, boolean>>();
  for (const name of decls.keys()) all.set(name, fields(name));
  return all;
}

test("types.ts declares what openapi.json defines, field by field", () => {
  const doc = JSON.parse(readFileSync(openapi, "utf8")) as { components: { schemas: Record<string, Schema> } };
  const ifaces = tsInterfaces();
  for (const name of ifaces.keys()) {
    assert.ok(components[name], `types.ts declares ${name}: map it to its openapi.json component in test/types.test.ts`);
  }
  const drift: string[] = [];
  for (const [iface, comp] of Object.entries(components)) {
    const t = ifaces.get(iface);
    assert.ok(t, `types.ts has no interface ${iface}`);
    const d = docFields(doc.components.schemas, comp);
    const missing = [...d.keys()].filter((k) => !t.has(k)).sort();
    const extra = [...t.keys()].filter((k) => !d.has(k)).sort();
    const optionality = [...t.entries()].filter(([k, req]) => d.has(k) && d.get(k) !== req).map(([k]) => k).sort();
    if (missing.length) drift.push(`${iface} lacks ${missing.join(", ")} of ${comp}`);
    if (extra.length) drift.push(`${iface} has ${extra.join(", ")}, which ${comp} does not define`);
    if (optionality.length) drift.push(`${iface}: ${optionality.join(", ")} required in one and optional in the other (${comp})`);
  }
  assert.deepEqual(drift, [], "types.ts drifted from openapi.json");
});
