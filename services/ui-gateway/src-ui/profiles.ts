// What the browser UI knows about the execution profiles, all of it from the server's profile
// registry (SettingsService.ListProfiles, read once per session before any screen renders): their
// names, the runtime each needs, and their selections. No view names or compares a profile.
import type { ExecutionProfileInfo } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { Inspection, Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";

/** One selection as the form shows it: the profile it belongs to, the words, and what runs. */
export interface SelectionForm {
  readonly profile: string;
  readonly selection: Selection;
  readonly title: string;
  readonly tokens: readonly string[];
  /** The words are followed by one to eight exact test files. */
  readonly files?: boolean;
  readonly execution: string;
}

/** The profiles of this server, as one session uses them. */
export interface ProfileCatalog {
  /** Profile names, the server's default first. */
  readonly names: readonly string[];
  /** The profile of a new instance. */
  readonly defaultProfile: string;
  /** The installed runtime each profile needs, in the server's order. */
  readonly runtimes: ReadonlyArray<{ readonly profile: string; readonly runtime: string }>;
  /** Every profile's selections, the default profile's first. */
  readonly selections: readonly SelectionForm[];
}

/** A catalog from ListProfiles' answer. */
export function createProfileCatalog(infos: readonly ExecutionProfileInfo[]): ProfileCatalog {
  const ordered = [...infos.filter((p) => p.isDefault), ...infos.filter((p) => !p.isDefault)];
  return {
    names: ordered.map((p) => p.name),
    defaultProfile: ordered[0]?.name ?? "",
    runtimes: ordered.map((p) => ({ profile: p.name, runtime: p.runtimeDescription })),
    selections: ordered.flatMap((p) =>
      p.selections.map((s) => ({ profile: p.name, selection: s.selection, title: s.title, tokens: s.tokens, files: s.takesTestFiles, execution: s.execution })),
    ),
  };
}

// The session's catalog: set by main.ts (useProfiles) after sign-in, before any screen renders.
let current: ProfileCatalog = createProfileCatalog([]);

/** Makes `catalog` the one every view reads (called once per session). */
export function useProfiles(catalog: ProfileCatalog): void {
  current = catalog;
}

/** The session's catalog. */
export function profiles(): ProfileCatalog {
  return current;
}

/** True when an inspection records a pinned Python, test files and a framework (its Python details). */
export function recordsPythonFacts(i: Inspection): boolean {
  return i.details.case === "python";
}

/** The form of selection `s` under `profile`, else under any profile (TEST means two things), else undefined. */
export function selectionForm(s: Selection, profile: string, catalog: ProfileCatalog = current): SelectionForm | undefined {
  return catalog.selections.find((x) => x.selection === s && x.profile === profile) ?? catalog.selections.find((x) => x.selection === s);
}

/** Which selection `tokens` spell, if any (a preview only: the server decides, with the settings' profile). */
export function matchSelection(tokens: readonly string[], catalog: ProfileCatalog = current): SelectionForm | undefined {
  return catalog.selections.find((x) =>
    x.files
      ? tokens.length > x.tokens.length && tokens.length <= x.tokens.length + 8 && x.tokens.every((t, i) => t === tokens[i])
      : x.tokens.length === tokens.length && x.tokens.every((t, i) => t === tokens[i]),
  );
}
