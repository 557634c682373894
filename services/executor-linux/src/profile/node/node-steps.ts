import { create } from "@bufbuild/protobuf";
import { Selection, StepSchema, SuppressedHookSchema } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason, checkRelativePath, isWithin } from "@seraph/profiles";
import { inspectTsconfigChain, resolveScript as resolveScriptGrammar, selectionScripts, type RejectedScript, type ResolvedScript } from "@seraph/profiles/node24-npm";
import { DEFAULT_NODE_BUILD_OUTPUT_DIR } from "./node-constants.js";
import type { NodeRun } from "./node-run.js";

/**
 * Resolves the selection's scripts, in selection order, by the script grammar. The build is
 * resolved first: it declares the output directory a later test step may name files in.
 */
export async function resolveSteps(run: NodeRun): Promise<void> {
  const { b } = run;
  let buildBlocked = false;
  for (const name of selectionScripts(b.selection)) {
    const body = run.scripts[name];
    if (body === undefined || typeof body !== "string") {
      b.reasons.push(
        body === undefined
          ? blockReason("script_missing", `package.json has no "${name}" script, which the selection runs.`, name)
          : blockReason("scripts_invalid", `package.json script "${name}" is not a string.`, name),
      );
      if (name === "build") buildBlocked = true;
      continue;
    }
    for (const hook of [`pre${name}`, `post${name}`]) {
      const hookBody = run.scripts[hook];
      if (hookBody !== undefined) run.hooks.push(create(SuppressedHookSchema, { scriptName: hook, body: typeof hookBody === "string" ? hookBody : JSON.stringify(hookBody) }));
    }
    const deferOutput = name === "test" && b.selection === Selection.BUILD_THEN_TEST;
    const r = resolveScript(run, name, body, deferOutput);
    if (!r.ok) {
      const dropped = name === "test" && buildBlocked && (r.reason.code === "path_not_found" || r.reason.code === "path_is_directory");
      if (!dropped) b.reasons.push(blockReason(r.reason.code as never, `The ${name} script "${body.trim()}" is refused: ${r.reason.message}`, r.reason.subject));
      if (name === "build") buildBlocked = true;
      continue;
    }
    run.resolvedSteps.push({ name, body, resolved: r });
    if (name === "build") {
      if (!(await declareBuildOutput(run, r))) buildBlocked = true;
    } else {
      b.deferredTestPaths = [...r.deferredPaths];
    }
  }
}

function resolveScript(run: NodeRun, name: "build" | "test", body: string, deferOutput: boolean): ResolvedScript | RejectedScript {
  return resolveScriptGrammar(body, { step: name, lookup: (rel) => run.reader.kind(rel), outputDir: deferOutput ? run.outputDir : undefined });
}

/**
 * The build's output directory: tsc's outDir (through the tsconfig chain) or the declared one of
 * a `node <entrypoint>` build; it must not contain an execution input. False when the build is
 * blocked by it.
 */
async function declareBuildOutput(run: NodeRun, r: ResolvedScript): Promise<boolean> {
  const { b, reader } = run;
  let blocked = false;
  if (r.form === "tsc_project" && r.tsconfig !== undefined) {
    run.needsTypescript = true;
    const chain = await inspectTsconfigChain(r.tsconfig, {
      kind: (rel) => reader.kind(rel),
      read: async (rel) => (await reader.read(rel, rel.startsWith("node_modules/") ? b.L.dependency_file_bytes : b.L.source_file_bytes)).bytes,
    });
    b.reasons.push(...chain.reasons);
    run.tsconfigFiles.push(...chain.files);
    run.outputDir = chain.outDir;
    if (chain.reasons.length > 0) blocked = true;
  } else {
    const declared = run.options.buildOutputDir ?? DEFAULT_NODE_BUILD_OUTPUT_DIR;
    const checked = checkRelativePath(declared, "build output directory");
    if (!checked.ok) {
      b.reasons.push(blockReason("build_output_dir_invalid", checked.reason.message, declared));
      blocked = true;
    } else {
      run.outputDir = checked.path;
    }
  }
  const outputDir = run.outputDir;
  if (outputDir !== undefined) {
    const clash = ["package.json", ...(run.lockName ? [run.lockName] : []), ...run.tsconfigFiles, ...r.paths].find((p) => isWithin(p, outputDir));
    if (clash !== undefined) {
      b.reasons.push(blockReason("build_output_dir_invalid", `The build output directory ${outputDir} contains ${clash}, an execution input the build must not overwrite.`, outputDir));
      blocked = true;
    }
    if (reader.kind(outputDir) === "other") {
      b.reasons.push(blockReason("build_output_dir_invalid", `The build output directory ${outputDir} is a link or special file in the repository.`, outputDir));
    }
  }
  return !blocked;
}

/** Steps with direct argv: the absolute runtime, then package-relative arguments (cwd = package root). */
export function emitSteps(run: NodeRun): void {
  for (const s of run.resolvedSteps) {
    run.b.steps.push(
      create(StepSchema, {
        name: s.name,
        scriptName: s.name,
        scriptBody: s.body,
        argv: [run.nodeReal, ...s.resolved.displayArgv.slice(1)],
        displayArgv: [...s.resolved.displayArgv],
      }),
    );
  }
}
