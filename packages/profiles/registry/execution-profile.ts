import type { Inspection, Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import type { CanonicalValue } from "../shared/canonical-json.js";

/** A parsed selection: one of the profile's finite selections and, where the profile takes them, the exact test files. */
export interface ParsedSelection {
  readonly selection: Selection;
  readonly testPaths: readonly string[];
}

/** One selection a profile offers, as the UI and CLI show it (served by SettingsService.ListProfiles). */
export interface SelectionMetadata {
  readonly selection: Selection;
  /** A short title ("Build then test", "Python pytest"). */
  readonly title: string;
  /** The words that name it ("npm", "run", "build"); test files follow when `takesTestFiles`. */
  readonly tokens: readonly string[];
  /** True when the selection names one to eight exact test files after its tokens. */
  readonly takesTestFiles: boolean;
  /** What runs, in one sentence. */
  readonly execution: string;
}

/** A backend the profile is shown under but never runs on (blocked with a stable code). */
export interface BlockedBackend {
  /** The backend's name in SandboxBackend terms ("docker"). */
  readonly backend: "docker";
  readonly title: string;
  readonly blockedCode: string;
  readonly blockedMessage: string;
}

/**
 * The pure contract of one execution profile: everything the API, the jobs service and the
 * executor must agree on (grammar, selection words, patch rules, approval wording, the
 * profile's own inspection-hash inputs, UI metadata). Host I/O — reading, staging, running —
 * is the executor's `HostProfile`, which wraps one of these. A profile is registered once, in
 * `registry/index.ts`; nothing outside a profile's folder compares its name.
 */
export interface ExecutionProfile {
  /** The stable name every inspection, setting and approval carries ("repo-…-v1"). */
  readonly name: string;
  /** A short human title ("Python 3 (CPython 3.11)"). */
  readonly title: string;
  /** The title of its local sandbox option in settings. */
  readonly optionTitle: string;
  /** The runtime its settings need, in words ("a CPython 3.11 interpreter"). */
  readonly runtimeWords: string;
  /** The prefix of its runtime's prerequisite items ("python" → python_runtime, python_version, python_hash). */
  readonly runtimeLabel: string;
  /** The default runtime path when the profile has one by absolute path ("" when it is found otherwise). */
  readonly defaultRuntimePath: string;
  /** The selection text used when a caller names none ("test", "npm test"). */
  readonly defaultSelectionText: string;
  /** The selections it offers, in display order. */
  readonly selections: readonly SelectionMetadata[];
  /** Backends it is shown under but blocked on. */
  readonly blockedBackends: readonly BlockedBackend[];
  /** What its approval documents say about cleanup. */
  readonly cleanupClaim: string;
  /** Parses selection text with this profile's grammar; throws SelectionError with its reason code. */
  parseSelection(text: string): ParsedSelection;
  /** The display words of a selection ("npm run build test", "python -m pytest tests/test_a.py"). */
  selectionText(selection: Selection, testPaths: readonly string[]): string;
  /** True when a request's allowed patch path is an input this profile never lets a patch change (beyond the shared package/lock/config rule). */
  immutableRequestPath(path: string): boolean;
  /** Why a patch may never touch `path` of this profile's `inspection`, beyond the shared rules; undefined when it may. */
  immutableInputReason(path: string, inspection: Inspection): string | undefined;
  /** The profile's own inputs to the inspection hash (merged into the hashed object; {} for none). */
  hashInputs(inspection: Inspection): Record<string, CanonicalValue>;
}
