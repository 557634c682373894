import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
// @ts-expect-error -- a plain ESM script without types: scripts/check-size.mjs
import { checkSize } from "../scripts/check-size.mjs";

type Offender = { path: string; name?: string; lines: number };
const root = fileURLToPath(new URL("..", import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), "seraph-structure-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

// docs/style.md's size rule (issue 23 item 2): no hand-written file in services/ or packages/ over
// 400 lines, no function over 80, except those the style guide lists with their reason.
describe("structure", () => {
  it("no source file over 400 lines or function over 80 outside the listed exceptions, and no stale exception", () => {
    const { failing, staleExceptions } = checkSize(root) as { failing: Offender[]; staleExceptions: string[] };
    expect(failing.map((o) => `${o.path}${o.name ? `#${o.name}` : ""} (${o.lines} lines)`)).toEqual([]);
    expect(staleExceptions).toEqual([]);
  });

  it("the check finds an oversized function and file (it is not vacuous)", () => {
    mkdirSync(join(scratch, "packages/x/src"), { recursive: true });
    mkdirSync(join(scratch, "docs"), { recursive: true });
    mkdirSync(join(scratch, "services"), { recursive: true });
    writeFileSync(join(scratch, "docs/style.md"), "# Style\n\n## Size exceptions\n\n");
    const body = Array.from({ length: 90 }, (_, i) => `  const v${i} = ${i};`).join("\n");
    writeFileSync(join(scratch, "packages/x/src/big.ts"), `export function big(): void {\n${body}\n}\n${"// filler\n".repeat(320)}`);
    const { failing } = checkSize(scratch) as { failing: Offender[] };
    expect(failing.map((o) => o.name ?? "file")).toEqual(expect.arrayContaining(["big", "file"]));
  });
});
