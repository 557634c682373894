/// <reference lib="dom" />
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { expect } from "vitest";

/** Debian's Chromium, or SERAPH_TEST_CHROMIUM. */
export const CHROMIUM = process.env["SERAPH_TEST_CHROMIUM"] ?? "/usr/bin/chromium";

/** True when Chromium is installed; in CI a missing one throws (a browser test fails there, never skips). */
export function haveChromium(): boolean {
  const have = existsSync(CHROMIUM);
  if (!have && process.env["CI"] === "true") throw new Error(`${CHROMIUM} is missing: CI must install Chromium for the browser tests (apt-get install -y chromium)`);
  return have;
}

/**
 * Headless Chromium on a fresh profile at 1280×800, and its page; every uncaught error and console
 * error of the page is pushed onto `errors` (a test expects none).
 */
export async function launchBrowser(userDataDir: string, errors: string[]): Promise<{ context: BrowserContext; page: Page }> {
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1280, height: 800 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (e) => errors.push(`${e.message}\n${e.stack ?? ""}`));
  page.on("console", (m) => {
    if (m.type() === "error" && !/Failed to load resource/.test(m.text())) errors.push(`console: ${m.text()}`);
  });
  return { context, page };
}

let axe: string | undefined;

/** axe-core over the whole page in its current state: every rule, zero violations of any impact. */
export async function expectAccessible(page: Page, state: string): Promise<void> {
  axe ??= readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
  // Evaluated over the DevTools protocol, so the page's CSP (no inline script) stays in force.
  if (!(await page.evaluate("typeof window.axe === 'object'"))) await page.evaluate(axe);
  const violations = (await page.evaluate("window.axe.run(document, { resultTypes: ['violations'] }).then((r) => r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ') + ' :: ' + n.failureSummary) })))")) as unknown[];
  expect(violations, `axe violations in state "${state}":\n${JSON.stringify(violations, null, 2)}`).toEqual([]);
}

/** Waits until `page` shows `text` in the (first) element with test id `testId`. */
export async function waitText(page: Page, testId: string, text: RegExp | string, timeout = 20_000): Promise<void> {
  await expect.poll(async () => (await page.getByTestId(testId).first().textContent()) ?? "", { timeout, interval: 200 }).toMatch(text);
}
