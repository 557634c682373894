// What the seraph-exec CLI loads (through the compiled bin, as users run it): `run` one bundle and
// nothing of the inspection, staging and profile code; the other subcommands their own modules.
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const BIN = fileURLToPath(new URL("../../bin/seraph-exec.js", import.meta.url));
const PACKAGE = fileURLToPath(new URL("../../", import.meta.url));
const REPO = fileURLToPath(new URL("../../../../", import.meta.url));

// A module-loader hook (node --import) that appends every file URL node loads as ES module or
// CommonJS (through the ESM loader: the entry and everything imported) to $SERAPH_LOAD_LOG.
const dir = mkdtempSync(join(tmpdir(), "seraph-cli-loading-"));
const hooks = join(dir, "hooks.mjs");
writeFileSync(
  hooks,
  `import { appendFileSync } from "node:fs";
export async function load(url, context, next) {
  if (url.startsWith("file:")) appendFileSync(process.env.SERAPH_LOAD_LOG, url + "\\n");
  return next(url, context);
}\n`,
);
const register = join(dir, "register.mjs");
writeFileSync(register, `import { register } from "node:module";\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let n = 0;
/** Runs the bin with `args` under the hook; resolves to the exit code and the files loaded (relative to the repository). */
function loads(args: readonly string[]): Promise<{ code: number; files: string[]; stdout: string }> {
  const log = join(dir, `load-${n++}.log`);
  writeFileSync(log, "");
  return new Promise((resolve) => {
    execFile(process.execPath, ["--import", pathToFileURL(register).href, BIN, ...args], { timeout: 60_000, env: { ...process.env, SERAPH_LOAD_LOG: log } }, (err, stdout) => {
      const code = err ? ((err as { code?: number }).code ?? 1) : 0;
      const files = readFileSync(log, "utf8")
        .split("\n")
        .filter((l) => l !== "")
        .map((u) => fileURLToPath(u))
        .filter((p) => p !== hooks && p !== register)
        .map((p) => (p.startsWith(REPO) ? p.slice(REPO.length) : p));
      resolve({ code: typeof code === "number" ? code : 1, files: [...new Set(files)], stdout });
    });
  });
}

const pkg = PACKAGE.slice(REPO.length);

describe("seraph-exec module loading", () => {
  it("`run` loads its bundle (the entry, then its chunks) and nothing else: no inspection, staging or profile module", async () => {
    const r = await loads(["run", "--json", "--job-user", "none", "--", "/bin/true"]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout.trim().split("\n").at(-1)!)).toMatchObject({ outcome: "succeeded" });
    expect(r.files[0]).toBe(`${pkg}bin/seraph-exec.js`);
    expect(r.files[1]).toBe(`${pkg}dist/cli-bundle/seraph-exec.mjs`);
    // The rest of `run`: the bundle's own chunks, nothing else.
    expect(r.files.slice(2).filter((f) => !/^dist\/cli-bundle\/[\w-]+\.mjs$/.test(f.slice(pkg.length)) || !f.startsWith(pkg))).toEqual([]);
    expect(r.files.length).toBeGreaterThan(2);
  });

  it("`run --help` loads the same bundle; `inspect --help` adds its own compiled modules", async () => {
    const run = await loads(["run", "--help"]);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^usage: seraph-exec run /);
    expect(run.files.filter((f) => f !== `${pkg}bin/seraph-exec.js` && !f.startsWith(`${pkg}dist/cli-bundle/`))).toEqual([]);
    const inspect = await loads(["inspect", "--help"]);
    expect(inspect.code).toBe(0);
    expect(inspect.stdout).toMatch(/^usage: seraph-exec inspect /);
    expect(inspect.files).toContain(`${pkg}dist/cli/inspect-command.js`);
    expect(inspect.files.some((f) => f.startsWith(`${pkg}dist/profile/`))).toBe(true);
  });

  it("the overall usage still names every subcommand; an unknown one (even an Object property name) is a usage error", async () => {
    const help = await loads(["--help"]);
    expect(help.code).toBe(0);
    for (const c of ["run", "probe", "inspect", "repair-run"]) expect(help.stdout).toContain(`usage: seraph-exec ${c} `);
    for (const bad of ["nope", "toString", "constructor"]) {
      const r = await loads([bad]);
      expect(r.code, bad).toBe(2);
    }
  });
});
