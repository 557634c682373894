// One word for where a repair stands, outcome first, and its badge: the same words the CLI prints.
import { h } from "./dom.js";

export { attemptRan, attemptStatus, failuresFirst, isFailingStatus, isSettled, JOB_OUTCOMES, PREPARED_OR_LATER, statusOf, testStatusWord } from "@seraph/profiles/outcome";

/** A status badge: a word with its own colour class (never colour alone: the word is the badge). */
export function badge(word: string, testId?: string): HTMLElement {
  return h("span", { class: `badge badge-${word}`, ...(testId ? { "data-testid": testId } : {}) }, word.charAt(0).toUpperCase() + word.slice(1));
}
