import { createHash } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";

/**
 * SHA-256 identifying the supervisor's own code: every compiled module of `supervisor/` and
 * `native/` under `distRoot` (tests and maps excluded), each as "<dir>/<file>\0<sha256>\n"
 * in sorted order. Third-party packages (koffi, protobuf, pino) are not included.
 */
export function supervisorSourceSha256(distRoot: string): string {
  const outer = createHash("sha256");
  for (const dir of ["native", "supervisor"]) {
    const files = readdirSync(join(distRoot, dir))
      .filter((f) => f.endsWith(".js") && !f.endsWith(".test.js"))
      .sort();
    for (const f of files) {
      const inner = createHash("sha256").update(readFileSync(join(distRoot, dir, f))).digest("hex");
      outer.update(`${dir}/${f}\0${inner}\n`);
    }
  }
  return outer.digest("hex");
}
