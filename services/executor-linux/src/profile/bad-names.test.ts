import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { checkFileName, escapePathBytes } from "@seraph/profiles";
import { Selection, type Inspection } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { pino } from "pino";
import { afterAll, describe, expect, it } from "vitest";
import { createExecutorService } from "../executor-service/executor-service.js";
import type { FixtureRepo } from "../../testing/fixture-repo.js";
import { createJsTestProject } from "../../testing/projects.js";
import { pinnedNodeForTests } from "../../testing/runtime-fixture.js";
import { inspectRepository } from "./inspect.js";

const node = (await pinnedNodeForTests()) ?? "";
const repos: FixtureRepo[] = [];
afterAll(async () => {
  await Promise.all(repos.map((r) => r.cleanup()));
});

async function repoWith(addBadName: (dir: string) => Promise<void>): Promise<FixtureRepo> {
  const r = await createJsTestProject({ failing: true });
  repos.push(r);
  await addBadName(r.dir);
  return r;
}

// Names written as raw bytes: node's fs takes a Buffer path as the kernel's bytes.
const rawPath = (dir: string, ...parts: (string | Buffer)[]) => Buffer.concat([Buffer.from(`${dir}/`), ...parts.flatMap((p, i) => (i === 0 ? [Buffer.from(p)] : [Buffer.from("/"), Buffer.from(p)]))]);

describe("bad file names in the inspected tree", () => {
  it("escapes a path so that every byte can be read back", () => {
    expect(escapePathBytes(Buffer.from([0x73, 0x72, 0x63, 0x2f, 0xff, 0x61]))).toBe("src/\\xffa");
    expect(escapePathBytes(Buffer.from("a\nb\\c\u00e9\u0085", "utf8"))).toBe("a\\x0ab\\\\c\u00e9\\x85");
    expect(checkFileName(Buffer.from("src"), Buffer.from("ok.js"))).toBeUndefined();
  });

  const cases: [string, (dir: string) => Promise<void>, string, string][] = [
    ["a non-UTF-8 name", (dir) => writeFile(rawPath(dir, "src", Buffer.from([0x62, 0xe9, 0x2e, 0x6a, 0x73])), "x"), "file_name_not_utf8", "src/b\\xe9.js"],
    ["a control character", (dir) => writeFile(join(dir, "src", "a\nb.js"), "x"), "file_name_control_character", "src/a\\x0ab.js"],
    ["a C1 control character", (dir) => writeFile(join(dir, "src", "a\u0085b.js"), "x"), "file_name_control_character", "src/a\\x85b.js"],
    [
      "an over-long path",
      async (dir) => {
        const deep = join(dir, "src", ...Array.from({ length: 6 }, (_, i) => `${i}`.repeat(200)));
        await mkdir(deep, { recursive: true });
        await writeFile(join(deep, "x.js"), "x");
      },
      "file_name_too_long",
      "src/",
    ],
    [
      "a bad name in the dependency tree",
      async (dir) => {
        await mkdir(rawPath(dir, "node_modules", Buffer.from([0x80])), { recursive: true });
      },
      "file_name_not_utf8",
      "node_modules/\\x80",
    ],
  ];

  for (const [what, add, code, subject] of cases) {
    it(`blocks inspection on ${what} with ${code} and the escaped path, never an unexpected error`, async () => {
      const r = await repoWith(add);
      const inspection = await inspectRepository({ repositoryPath: r.dir, selection: Selection.TEST, nodePath: node, sourcePaths: ["src", "test"] });
      expect(inspection.admitted).toBe(false);
      expect(inspection.reasons.map((x) => x.code)).toEqual([code]);
      expect(inspection.reasons[0]!.subject.startsWith(subject), inspection.reasons[0]!.subject).toBe(true);
      expect(inspection.inspectionSha256).toBe("");
      // Through the node's API: a blocked inspection, not INTERNAL or UNAVAILABLE.
      const svc = createExecutorService({ nodeId: "n", repositoryRoots: [join(r.dir, "..")], log: pino({ level: "silent" }) });
      const res = (await svc.inspect!({ repositoryPath: r.dir, selection: Selection.TEST, runtimePath: node, sourcePaths: ["src", "test"] } as never, {} as never)) as unknown as { inspection?: Inspection };
      expect((res.inspection?.reasons ?? []).map((x) => x.code)).toEqual([code]);
    });
  }
});
