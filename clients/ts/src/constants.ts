// The contract's numbers and codes as constants, so an app compares against
// names instead of literals. test/constants.test.ts checks each against the
// Go side: e2e/testdata/tsclient-constants.golden.json (written by the Go
// test TestTSClientConstantsGolden from agent/provider, agent/localapi and
// relay) and agent/provider/testdata/install-answers.json (the install
// answers, agent/provider's table).

/** Close codes of the provider websocket (docs/provider-protocol.md). */
export const CloseCodes = Object.freeze({
  /** The agent is shutting down: dial again (the provider does, re-reading the discovery file). */
  GOING_AWAY: 1001,
  /** A message over the agent's bound: the app sent too much. */
  MESSAGE_TOO_BIG: 1009,
  /** A newer provider connection replaced this one: do not dial again (the two would fight). */
  REPLACED: 4001,
  /** No protocol version in common: dialling again cannot help. */
  UNSUPPORTED_VERSION: 4002,
  /** A protocol error (no hello in time, binary, bad JSON). */
  PROTOCOL_ERROR: 4003,
  /** The owner's policy selects the builtin provider (`roomrelay provider app` selects the app). */
  NOT_SELECTED: 4004,
} as const);

/**
 * The closed set of command error codes (relay/errors.go): what the cloud
 * caller sees, and what a command run for the app's Rooms can fail with.
 */
export const CommandErrorCodes = Object.freeze({
  NOT_ENROLLED: "not_enrolled",
  DEVICE_OFFLINE: "device_offline",
  PROJECT_NOT_ENABLED: "project_not_enabled",
  COMMAND_NOT_ALLOWED: "command_not_allowed",
  INVALID_ARGS: "invalid_args",
  NOT_FOUND: "not_found",
  PENDING_REVIEW: "pending_review",
  IDEMPOTENCY_CONFLICT: "idempotency_conflict",
  EXPIRED: "expired",
  BUSY: "busy",
  RATE_LIMITED: "rate_limited",
  SANDBOX_FAILED: "sandbox_failed",
  APP_NOT_RUNNING: "app_not_running",
  INTERNAL: "internal",
} as const);
export type CommandErrorCode = (typeof CommandErrorCodes)[keyof typeof CommandErrorCodes];

/** The command error codes a caller may retry (relay's table). */
export const RETRYABLE_COMMAND_ERRORS: ReadonlySet<string> = new Set<string>([
  CommandErrorCodes.DEVICE_OFFLINE,
  CommandErrorCodes.EXPIRED,
  CommandErrorCodes.BUSY,
  CommandErrorCodes.RATE_LIMITED,
  CommandErrorCodes.APP_NOT_RUNNING,
  CommandErrorCodes.INTERNAL,
]);

/**
 * The local API's own error codes (agent/localapi), besides the command
 * codes it passes on (not_found, invalid_args, rate_limited, busy, internal…).
 */
export const LocalAPIErrorCodes = Object.freeze({
  FORBIDDEN: "forbidden",
  CONFLICT: "conflict",
  HASH_MISMATCH: "hash_mismatch",
  PRECONDITION_FAILED: "precondition_failed",
  UNSUPPORTED_API_VERSION: "unsupported_api_version",
  TOO_LARGE: "too_large",
  UNAVAILABLE: "unavailable",
  METHOD_NOT_ALLOWED: "method_not_allowed",
} as const);

/** Codes a handler may refuse with: `throw new ProviderError(ProviderErrorCodes.NOT_FOUND, …)`. */
export const ProviderErrorCodes = Object.freeze({
  NOT_FOUND: "not_found",
  INVALID_ARGS: "invalid_args",
  HASH_MISMATCH: "hash_mismatch",
  BUSY: "busy",
  INTERNAL: "internal",
} as const);

/** What an answer to apps.install does to the install. */
export const InstallOutcomes = Object.freeze({
  /** The app installed it (a result). */
  INSTALLED: "installed",
  /** Ends the install as failed, visibly; never delivered again. */
  FAILED: "failed",
  /** Stays pending: delivered again (1 s doubling to 5 min, at once on the next hello). */
  RETRIED: "retried",
} as const);
export type InstallOutcome = (typeof InstallOutcomes)[keyof typeof InstallOutcomes];

export interface InstallAnswer {
  /** The data.code of the app's error answer (ProviderError's code). */
  code: string;
  outcome: InstallOutcome;
  meaning: string;
}

/**
 * The install answers (agent/provider's table): which ProviderError codes
 * end an install as failed and which are retried. A code not listed, a
 * throw that is not a ProviderError, no answer by the deadline and the
 * connection closing are all retried.
 */
export const INSTALL_ANSWERS: readonly InstallAnswer[] = Object.freeze([
  { code: ProviderErrorCodes.HASH_MISMATCH, outcome: InstallOutcomes.FAILED, meaning: "the files do not hash to content_hash (the app recomputed it)" },
  { code: ProviderErrorCodes.INVALID_ARGS, outcome: InstallOutcomes.FAILED, meaning: "the app refused the arguments or the content" },
  { code: ProviderErrorCodes.NOT_FOUND, outcome: InstallOutcomes.FAILED, meaning: "the Room is gone" },
  { code: ProviderErrorCodes.BUSY, outcome: InstallOutcomes.RETRIED, meaning: "the app cannot install now" },
  { code: ProviderErrorCodes.INTERNAL, outcome: InstallOutcomes.RETRIED, meaning: "the app failed; any other code, or none, reads the same" },
].map((a) => Object.freeze(a)));

/** installOutcome is what an apps.install error answer with this code does: failed or retried. */
export function installOutcome(code: string): InstallOutcome {
  return INSTALL_ANSWERS.find((a) => a.code === code)?.outcome ?? InstallOutcomes.RETRIED;
}
