import { createHash } from "node:crypto";
import type { ApprovalDocument, Proposal } from "@seraph/proto/seraph/api/v1/repairs_pb.js";

/** How many lines of the diff the approve prompt prints before it points to `seraph repair diff`. */
export const APPROVE_DIFF_LINES = 400;

const RESET = "\u001b[0m";

// Characters a terminal would act on instead of showing: C0 controls but tab (an escape sequence
// could recolour, move the cursor or erase a line; a lone CR overwrites it), DEL, C1 controls, and
// the Unicode bidirectional overrides and isolates that reorder what is shown ("Trojan Source").
const UNSHOWABLE = /[\u0000-\u0008\u000a-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/** `line` with every character a terminal would act on written as a visible `\uXXXX` escape. */
export function showable(line: string): string {
  return line.replace(UNSHOWABLE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** The ANSI colour of a unified-diff line, as `git diff` colours it. */
function colourOf(line: string): string | undefined {
  if (/^(diff |index |--- |\+\+\+ |new file mode|deleted file mode|similarity |rename )/.test(line)) return "\u001b[1m";
  if (line.startsWith("@@")) return "\u001b[36m";
  if (line.startsWith("+")) return "\u001b[32m";
  if (line.startsWith("-")) return "\u001b[31m";
  return undefined;
}

/** What the prompt shows of the patch, and whether the diff shown is the one the document binds. */
export interface PatchShown {
  readonly text: string;
  /** The SHA-256 of the diff's bytes equals the document's `proposal_sha256`. */
  readonly matches: boolean;
}

/**
 * The patch an approval document binds, as the approve prompt prints it before asking: the diff's
 * SHA-256 computed here beside the document's `proposal_sha256`, the changed paths, then the diff
 * (at most `maxLines` lines, then "… N more lines" and the command that prints all of it),
 * coloured when `colour`. Characters a terminal would act on are shown as `\uXXXX` escapes, so a
 * patch cannot hide a line from the person approving it; the hash is over the bytes as stored.
 */
export function patchText(p: Proposal | undefined, doc: ApprovalDocument, colour: boolean, maxLines = APPROVE_DIFF_LINES): PatchShown {
  if (p === undefined) {
    return { text: `PATCH: proposal ${doc.proposalId} is not in the repair as read, so its diff cannot be shown\n`, matches: false };
  }
  const sha256 = createHash("sha256").update(p.diff, "utf8").digest("hex");
  const matches = sha256 === doc.proposalSha256;
  const lines = p.diff === "" ? [] : p.diff.replace(/\n$/, "").split("\n");
  const shown = lines.slice(0, maxLines).map((l) => {
    const text = showable(l);
    const c = colour ? colourOf(l) : undefined;
    return c ? `${c}${text}${RESET}` : text;
  });
  const more = lines.length - shown.length;
  const diffCommand = `seraph repair diff ${doc.repairId.slice(0, 8)} --proposal ${p.id.slice(0, 8)}`;
  const out = [
    `PATCH (proposal ${p.id}): the diff this document runs, ${lines.length} line${lines.length === 1 ? "" : "s"}`,
    `  diff sha256         ${sha256}   (computed here from the diff below)`,
    `  proposal sha256     ${doc.proposalSha256}   (in the document: ${matches ? "matches" : "DOES NOT MATCH"})`,
    `  changes             ${p.changedPaths.join(", ") || "-"}`,
    "----- diff -----",
    ...shown,
    ...(more > 0 ? [`… ${more} more line${more === 1 ? "" : "s"} not shown: ${diffCommand} prints all of it`] : []),
    "----- end of diff -----",
    "",
  ];
  return { text: out.join("\n"), matches };
}
