import { stat, statfs } from "node:fs/promises";
import { dirname } from "node:path";
import { limitValues } from "../profile/index.js";
import type { AdmissionRefusal } from "./admission.js";
import { reason, type Ctx } from "./attempt.js";

import { DEFAULT_MIN_FREE_BYTES, RUN_DIR_FILES_BYTES } from "./space-floor.js";

const MiB = 1024 * 1024;

/** One filesystem the job writes and what it needs there. */
interface Need {
  readonly path: string;
  readonly dev: number;
  readonly free: number;
  bytes: number;
  readonly parts: string[];
}

/** Free bytes for an unprivileged writer (bavail × bsize) and the device of the filesystem holding `path` (or its nearest existing ancestor). */
async function filesystemOf(path: string): Promise<{ dev: number; free: number }> {
  for (let p = path; ; p = dirname(p)) {
    const st = await stat(p).catch(() => undefined);
    if (st !== undefined) {
      const fs = await statfs(p);
      return { dev: st.dev, free: fs.bavail * fs.bsize };
    }
    if (p === dirname(p)) throw new Error(`no existing directory above ${path}`);
  }
}

const mib = (n: number): string => `${(n / MiB).toFixed(1)} MiB`;

/**
 * The free-space floor, checked before anything of the attempt is written: the run directories'
 * filesystem (the data directory) must hold the job's output limit (its journals) plus
 * RUN_DIR_FILES_BYTES per step, and the staging filesystem (the job root with a job user, else
 * the data directory) the floor `SERAPH_MIN_FREE_BYTES`; on one filesystem the two add up. Free
 * space is what statfs gives an unprivileged writer (blocks reserved for root do not count).
 * Undefined when there is room; else `rejected_insufficient_space` naming each filesystem short
 * of space, what it has and what it needs. The supervisor's own guarantee (its receipt always
 * fits, output past a full disk is counted and hashed, not kept) does not depend on this check.
 */
export async function spaceRefusal(ctx: Pick<Ctx, "deps" | "bundle" | "jobUser">): Promise<AdmissionRefusal | undefined> {
  const { deps, bundle } = ctx;
  const limits = limitValues(bundle.inspection?.limits ?? bundle.limits ?? ({} as never));
  const steps = Math.max(1, bundle.inspection?.steps.length ?? 1);
  const floor = deps.minFreeBytes ?? DEFAULT_MIN_FREE_BYTES;
  const staging = ctx.jobUser !== undefined && deps.containment !== undefined ? deps.containment.settings.jobRoot : deps.dataDir;
  const wanted = [
    { path: deps.dataDir, bytes: limits.output_bytes + steps * RUN_DIR_FILES_BYTES, part: `the run directories (output limit ${mib(limits.output_bytes)} + ${steps} × ${mib(RUN_DIR_FILES_BYTES)})` },
    { path: staging, bytes: floor, part: `staging (SERAPH_MIN_FREE_BYTES ${mib(floor)})` },
  ];
  const needs: Need[] = [];
  for (const w of wanted) {
    const fs = await filesystemOf(w.path);
    const same = needs.find((n) => n.dev === fs.dev);
    if (same !== undefined) {
      same.bytes += w.bytes;
      same.parts.push(w.part);
    } else {
      needs.push({ path: w.path, dev: fs.dev, free: fs.free, bytes: w.bytes, parts: [w.part] });
    }
  }
  const short = needs.filter((n) => n.free < n.bytes);
  if (short.length === 0) return undefined;
  const say = (n: Need): string => `${n.path} has ${mib(n.free)} free; the job needs ${mib(n.bytes)} there: ${n.parts.join(" + ")}`;
  return {
    outcome: "rejected_insufficient_space",
    message: `not enough free space to start the job: ${short.map(say).join("; ")}`.slice(0, 2000),
    reasons: short.map((n) => reason("insufficient_space", `${say(n)}.`.slice(0, 500), n.path)),
  };
}
