// What the browser UI knows about the execution profiles, in one place: their names, the runtime
// each needs, which inspection facts each records, and the selections of both. Every profile name
// the views show or compare comes from here, so that serving this from the API (profile
// metadata) replaces one module, not literals across the views.
import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";

/** The Python profile (the seeds' default): a pinned CPython 3, bounded unittest/pytest forms. */
export const PYTHON_PROFILE = "repo-python3-v1";

/** The optional Node profile: inspected package.json scripts turned into direct argv for a pinned Node. */
export const NODE_PROFILE = "repo-node24-npm-v1";

/** The profile a selection is named by when the repair does not say (no inspection yet). */
export const DEFAULT_SELECTION_PROFILE = NODE_PROFILE;

/** The installed runtime each profile needs, in the order the settings form names them. */
export const PROFILE_RUNTIMES: ReadonlyArray<{ readonly profile: string; readonly runtime: string }> = [
  { profile: PYTHON_PROFILE, runtime: "CPython 3.11" },
  { profile: NODE_PROFILE, runtime: "Node 24" },
];

/** True when an inspection under `profile` records a pinned Python, test files and a framework. */
export function recordsPythonFacts(profile: string): boolean {
  return profile === PYTHON_PROFILE;
}

/** One selection as the form shows it: the profile it belongs to, the words, and what runs. */
export interface SelectionForm {
  readonly profile: string;
  readonly selection: Selection;
  readonly title: string;
  readonly tokens: readonly string[];
  /** The words are followed by one to eight exact test files (the Python forms). */
  readonly files?: boolean;
  readonly execution: string;
}

/** The selections of both profiles, the default (Python) first: the words in the form, one token a line. */
export const SELECTIONS: readonly SelectionForm[] = [
  { profile: PYTHON_PROFILE, selection: Selection.PYTHON_UNITTEST, title: "Python unittest", tokens: ["python", "-m", "unittest"], files: true, execution: "unittest over one to eight exact test files" },
  { profile: PYTHON_PROFILE, selection: Selection.PYTHON_PYTEST, title: "Python pytest", tokens: ["python", "-m", "pytest"], files: true, execution: "pytest from the repository's virtual environment over one to eight exact test files" },
  { profile: PYTHON_PROFILE, selection: Selection.TEST, title: "Python declared test command", tokens: ["test"], execution: "pyproject.toml's test task, only when it reduces to one of the forms above" },
  { profile: NODE_PROFILE, selection: Selection.TEST, title: "Test", tokens: ["npm", "test"], execution: "Inspected test script" },
  { profile: NODE_PROFILE, selection: Selection.BUILD, title: "Build", tokens: ["npm", "run", "build"], execution: "Inspected build script" },
  { profile: NODE_PROFILE, selection: Selection.BUILD_THEN_TEST, title: "Build then test", tokens: ["npm", "run", "build", "test"], execution: "Build result, then test result" },
];

/** The form of selection `s` under `profile`, else under any profile (TEST means two things), else undefined. */
export function selectionForm(s: Selection, profile: string): SelectionForm | undefined {
  return SELECTIONS.find((x) => x.selection === s && x.profile === profile) ?? SELECTIONS.find((x) => x.selection === s);
}

/** Which selection `tokens` spell, if any (a preview only: the server decides, with the settings' profile). */
export function matchSelection(tokens: readonly string[]): SelectionForm | undefined {
  return SELECTIONS.find((x) =>
    x.files
      ? tokens.length > x.tokens.length && tokens.length <= x.tokens.length + 8 && x.tokens.every((t, i) => t === tokens[i])
      : x.tokens.length === tokens.length && x.tokens.every((t, i) => t === tokens[i]),
  );
}
