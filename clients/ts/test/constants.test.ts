// The exported constants against the Go side: close codes, command and
// local API error codes from e2e/testdata/tsclient-constants.golden.json
// (e2e.TestTSClientConstantsGolden keeps it equal to the Go constants), and
// the install answers from agent/provider/testdata/install-answers.json
// (agent/provider's table, kept by its TestInstallAnswersDocumented).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";
import {
  CLOSE_NOT_SELECTED,
  CLOSE_REPLACED,
  CloseCodes,
  CommandErrorCodes,
  INSTALL_ANSWERS,
  InstallOutcomes,
  LocalAPIErrorCodes,
  ProviderErrorCodes,
  RETRYABLE_COMMAND_ERRORS,
  installOutcome,
} from "../src/index.js";

// dist/test/constants.test.js -> the repository root
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const readJSON = (rel: string): unknown => JSON.parse(readFileSync(path.join(root, rel), "utf8"));

interface Golden {
  close_codes: Record<string, number>;
  command_error_codes: { code: string; retryable: boolean }[];
  localapi_error_codes: string[];
}
const golden = readJSON("e2e/testdata/tsclient-constants.golden.json") as Golden;

test("close codes equal agent/provider's", () => {
  assert.deepEqual({ ...CloseCodes }, golden.close_codes);
  assert.equal(CLOSE_REPLACED, CloseCodes.REPLACED);
  assert.equal(CLOSE_NOT_SELECTED, CloseCodes.NOT_SELECTED);
});

test("command error codes and their retryability equal relay's table", () => {
  assert.deepEqual(Object.values(CommandErrorCodes), golden.command_error_codes.map((c) => c.code));
  assert.deepEqual([...RETRYABLE_COMMAND_ERRORS].sort(), golden.command_error_codes.filter((c) => c.retryable).map((c) => c.code).sort());
});

test("the local API's own error codes equal agent/localapi's", () => {
  assert.deepEqual(Object.values(LocalAPIErrorCodes).sort(), [...golden.localapi_error_codes].sort());
});

test("install answers equal agent/provider's table; hash_mismatch is a refusal", () => {
  const table = readJSON("agent/provider/testdata/install-answers.json") as { answers: { code: string; outcome: string; meaning: string }[] };
  assert.deepEqual(INSTALL_ANSWERS.map((a) => ({ ...a })), table.answers);
  for (const a of table.answers) assert.ok((Object.values(ProviderErrorCodes) as string[]).includes(a.code), `ProviderErrorCodes has ${a.code}`);
  assert.equal(installOutcome(ProviderErrorCodes.HASH_MISMATCH), InstallOutcomes.FAILED);
  assert.equal(installOutcome(ProviderErrorCodes.BUSY), InstallOutcomes.RETRIED);
  assert.equal(installOutcome("some_code_nobody_listed"), InstallOutcomes.RETRIED, "a code not listed is retried");
});
