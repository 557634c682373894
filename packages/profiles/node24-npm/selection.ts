import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { SelectionError } from "../shared/errors.js";
import { blockReason } from "../shared/reasons.js";

/** The canonical token form of each selection, one token a line in the request. */
export const SELECTION_TOKENS: ReadonlyMap<Selection, readonly string[]> = new Map([
  [Selection.TEST, ["npm", "test"]],
  [Selection.BUILD, ["npm", "run", "build"]],
  [Selection.BUILD_THEN_TEST, ["npm", "run", "build", "test"]],
]);

/** The package.json script names a selection runs, in order. */
export function selectionScripts(selection: Selection): readonly ("build" | "test")[] {
  switch (selection) {
    case Selection.TEST:
      return ["test"];
    case Selection.BUILD:
      return ["build"];
    case Selection.BUILD_THEN_TEST:
      return ["build", "test"];
    default:
      return [];
  }
}

/**
 * Parses selection text — tokens separated by newlines or spaces, trimmed — into one of the three
 * finite selections. The words only name the selection; npm is never run. Throws SelectionError
 * (code `selection_empty` or `selection_unknown`) for anything else.
 */
export function parseSelection(text: string): Selection {
  const tokens = text.split(/[\s]+/).filter((t) => t.length > 0);
  if (tokens.length === 0) {
    throw new SelectionError([blockReason("selection_empty", "No selection was given; use one of: npm test, npm run build, npm run build test.")]);
  }
  const joined = tokens.join(" ");
  for (const [selection, expected] of SELECTION_TOKENS) {
    if (expected.join(" ") === joined) return selection;
  }
  const shown = joined.length > 80 ? `${joined.slice(0, 80)}…` : joined;
  throw new SelectionError([
    blockReason(
      "selection_unknown",
      `"${shown}" is not a selection; the only selections are npm test, npm run build, and npm run build test (one token a line).`,
      shown,
    ),
  ]);
}

/** The display form of a selection ("npm run build test"). */
export function selectionText(selection: Selection): string {
  return (SELECTION_TOKENS.get(selection) ?? []).join(" ");
}
