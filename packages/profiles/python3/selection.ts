import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { SelectionError } from "../shared/errors.js";
import { blockReason } from "../shared/reasons.js";
import { reduceCommand, type PythonForm } from "./command.js";

/** The profile name every Python inspection carries. */
export const PYTHON_PROFILE = "repo-python3-v1";

/** A parsed Python selection: the finite selection and, for the two explicit forms, the exact files. */
export interface PythonSelection {
  readonly selection: Selection;
  /** Normalised repository-relative test files; empty for the declared command (`test`). */
  readonly testPaths: readonly string[];
}

/** The selection of each form. */
export function formSelection(form: PythonForm): Selection {
  return form === "unittest" ? Selection.PYTHON_UNITTEST : Selection.PYTHON_PYTEST;
}

/** The form a Python selection names; undefined for the declared command and foreign selections. */
export function selectionForm(selection: Selection): PythonForm | undefined {
  if (selection === Selection.PYTHON_UNITTEST) return "unittest";
  if (selection === Selection.PYTHON_PYTEST) return "pytest";
  return undefined;
}

/** True when `selection` is one the Python profile runs. */
export function isPythonSelection(selection: Selection): boolean {
  return selection === Selection.TEST || selection === Selection.PYTHON_UNITTEST || selection === Selection.PYTHON_PYTEST;
}

/**
 * Parses Python selection text (tokens separated by spaces or newlines). The words name a
 * server-owned form, never an argv: `test` is the repository's declared test command (inspected,
 * admitted only when it reduces exactly to a form); `python -m unittest F…`, `python -m pytest F…`
 * and `pytest F…` name a form over one to eight exact test files (see reduceCommand). Throws
 * SelectionError with the grammar's stable code for anything else.
 */
export function parsePythonSelection(text: string): PythonSelection {
  const tokens = text.split(/\s+/).filter((t) => t.length > 0);
  if (tokens.length === 0) {
    throw new SelectionError([blockReason("selection_empty", "No selection was given; use test, python -m unittest FILE…, or python -m pytest FILE….")]);
  }
  if (tokens.length === 1 && tokens[0] === "test") return { selection: Selection.TEST, testPaths: [] };
  const reduced = reduceCommand(tokens.join(" "));
  if (!reduced.ok) throw new SelectionError([reduced.reason]);
  return { selection: formSelection(reduced.form), testPaths: reduced.paths };
}

/** The display words of a Python selection ("python -m pytest tests/test_a.py", or "test"). */
export function pythonSelectionText(selection: Selection, testPaths: readonly string[]): string {
  const form = selectionForm(selection);
  if (form === undefined) return selection === Selection.TEST ? "test" : "";
  return ["python", "-m", form, ...testPaths].join(" ");
}
