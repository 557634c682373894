/** The outcome of looking for the one unified diff in a model's answer. */
export type DiffExtraction = { readonly ok: true; readonly diff: string } | { readonly ok: false; readonly reason: "model_no_diff" | "model_multiple_diffs"; readonly message: string };

const FENCE = /^(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n([\s\S]*?)^\1[ \t]*$/gm;
const DIFF_LINE = /^(diff --git |index |--- |\+\+\+ |@@ |[ +-]|\\ No newline|new file mode |deleted file mode |similarity index |old mode |new mode |$)/;

function looksLikeDiff(text: string): boolean {
  return /^--- .*\n\+\+\+ .*\n@@ /m.test(text);
}

function withNewline(s: string): string {
  return s.endsWith("\n") ? s : `${s}\n`;
}

/**
 * Finds exactly one unified diff in a chat answer: one fenced block labelled diff/patch (or an
 * unlabelled fence whose body is a diff), or else a raw diff starting at the first `diff --git` or
 * `--- ` line followed by `+++ ` and a hunk, up to the first line that cannot belong to a diff.
 * Several fenced diffs are refused (`model_multiple_diffs`); none is `model_no_diff`.
 */
export function extractUnifiedDiff(answer: string): DiffExtraction {
  const text = answer.replace(/\r\n/g, "\n");
  const fenced: string[] = [];
  for (const m of text.matchAll(FENCE)) {
    const lang = (m[2] ?? "").toLowerCase();
    const body = m[3] ?? "";
    if (lang === "diff" || lang === "patch" || lang === "udiff" || (lang === "" && looksLikeDiff(body))) {
      if (looksLikeDiff(body)) fenced.push(body);
    }
  }
  if (fenced.length > 1) return { ok: false, reason: "model_multiple_diffs", message: `The model answered with ${fenced.length} separate diffs; exactly one is accepted.` };
  if (fenced.length === 1) return { ok: true, diff: withNewline(fenced[0] as string) };
  const lines = text.split("\n");
  let start = -1;
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i] as string;
    if (l.startsWith("diff --git ") || (l.startsWith("--- ") && (lines[i + 1] ?? "").startsWith("+++ ") && (lines[i + 2] ?? "").startsWith("@@ "))) {
      start = i;
      break;
    }
  }
  if (start < 0) return { ok: false, reason: "model_no_diff", message: "The model's answer contains no unified diff." };
  let end = start;
  while (end < lines.length && DIFF_LINE.test(lines[end] as string)) end++;
  const diff = lines.slice(start, end).join("\n").replace(/\n+$/, "\n");
  if (!looksLikeDiff(diff)) return { ok: false, reason: "model_no_diff", message: "The model's answer contains no complete unified diff (---, +++ and a hunk)." };
  return { ok: true, diff: withNewline(diff) };
}
