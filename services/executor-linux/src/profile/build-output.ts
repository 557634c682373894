import { lstat } from "node:fs/promises";
import { join } from "node:path";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, formatCount, limitValues } from "@seraph/profiles";
import { lstatInside, sortedEntries } from "./safe-fs.js";
import { verifyStagedTree, type StagedRepository } from "./stage.js";

/**
 * Validates a build's effects after it ran and before any test runs: nothing outside the declared
 * output directory changed (the staged, patched sources and dependency tree are re-hashed); the
 * output directory holds only directories and regular files (no links, so nothing can point out of
 * the job) within the output limit; and every test path the test step needs exists there as a
 * regular file. Returns the reasons (empty when valid).
 */
export async function validateBuildOutput(stage: StagedRepository): Promise<BlockReason[]> {
  const reasons: BlockReason[] = [];
  const outDir = stage.outputDir;
  const differences = await verifyStagedTree(stage.packageDir, stage.files, stage.links, outDir);
  for (const d of differences.slice(0, 10)) {
    reasons.push(blockReason("build_wrote_outside_output_dir", `The build ${d.change === "added" ? "created" : d.change === "missing" ? "removed" : "changed"} ${d.path}, outside the declared output directory ${outDir || "(none)"}.`, d.path));
  }
  if (outDir !== "") {
    const max = limitValues(stage.inspection.limits ?? ({} as never)).output_bytes;
    let bytes = 0;
    const walk = async (rel: string): Promise<void> => {
      for (const name of await sortedEntries(join(stage.packageDir, rel), rel)) {
        const child = `${rel}/${name}`;
        const st = await lstat(join(stage.packageDir, child));
        if (st.isDirectory()) await walk(child);
        else if (st.isSymbolicLink()) reasons.push(blockReason("build_output_link", `The build output ${child} is a link; build output may hold only regular files.`, child));
        else if (st.isFile()) bytes += st.size;
        else reasons.push(blockReason("build_output_special_file", `The build output ${child} is a special file.`, child));
      }
    };
    const top = await lstatInside(stage.packageDir, outDir);
    if (top?.isDirectory()) await walk(outDir);
    else if (top) reasons.push(blockReason("build_output_link", `The build output directory ${outDir} is not a directory.`, outDir));
    else if (stage.deferredTestPaths.length > 0) reasons.push(blockReason("build_output_missing", `The build did not create its output directory ${outDir}.`, outDir));
    if (bytes > max) reasons.push(blockReason("build_output_too_large", `The build output has ${formatCount(bytes)} bytes; the profile allows ${formatCount(max)}.`, outDir));
  }
  for (const p of stage.deferredTestPaths) {
    const st = await lstatInside(stage.packageDir, p);
    if (!st?.isFile()) {
      reasons.push(blockReason("test_path_missing_after_build", `The test step needs ${p}, but the build did not produce it as a regular file.`, p));
    }
  }
  return reasons;
}
