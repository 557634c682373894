import { posix } from "node:path";
import { parse, printParseErrorCode, type ParseError } from "jsonc-parser";
import type { BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";
import { blockReason } from "../shared/reasons.js";
import type { PathKind } from "./script-grammar.js";

/** How the chain reader sees the package: kinds of paths and their bytes (read once, cached). */
export interface TsconfigReader {
  readonly kind: (rel: string) => PathKind;
  readonly read: (rel: string) => Promise<Buffer>;
}

/** A tsconfig and everything it extends, with the build output it declares. */
export interface TsconfigChain {
  /** Package-relative paths of the config and every config it extends (in or under node_modules too). */
  readonly files: readonly string[];
  /** Package-relative outDir, when declared. */
  readonly outDir?: string;
  readonly noEmit: boolean;
  readonly reasons: readonly BlockReason[];
}

const MAX_DEPTH = 16;

interface RawConfig {
  extends?: unknown;
  references?: unknown;
  compilerOptions?: Record<string, unknown>;
}

/** Parses tsconfig text the way tsc does (comments and trailing commas allowed). */
export function parseTsconfigText(text: string): { value?: RawConfig; error?: string } {
  const errors: ParseError[] = [];
  const value = parse(text, errors, { allowTrailingComma: true, disallowComments: false }) as unknown;
  if (errors.length > 0) {
    const first = errors[0] as ParseError;
    return { error: `${printParseErrorCode(first.error)} at offset ${first.offset}` };
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return { error: "the top level is not an object" };
  return { value: value as RawConfig };
}

function resolveExtends(spec: string, fromRel: string, reader: TsconfigReader): { rel?: string; reason?: BlockReason } {
  if (spec.startsWith("/") || /^[A-Za-z]:[\\/]/.test(spec)) {
    return { reason: blockReason("tsconfig_extends_absolute", `${fromRel} extends the absolute path ${spec}; only relative paths or packages inside the snapshot are allowed.`, fromRel) };
  }
  const candidates: string[] = [];
  if (spec.startsWith("./") || spec.startsWith("../")) {
    const joined = posix.normalize(posix.join(posix.dirname(fromRel), spec));
    if (joined === ".." || joined.startsWith("../")) {
      return { reason: blockReason("tsconfig_extends_outside_package", `${fromRel} extends ${spec}, which is outside the package.`, fromRel) };
    }
    candidates.push(joined, `${joined}.json`);
  } else {
    if (!/^(@[A-Za-z0-9._-]+\/)?[A-Za-z0-9._-]+(\/[A-Za-z0-9._-]+)*$/.test(spec) || spec.split("/").includes("..")) {
      return { reason: blockReason("tsconfig_extends_unresolved", `${fromRel} extends "${spec}", which is not a package path this profile can resolve.`, fromRel) };
    }
    candidates.push(`node_modules/${spec}`, `node_modules/${spec}.json`, `node_modules/${spec}/tsconfig.json`);
  }
  for (const c of candidates) if (reader.kind(c) === "file") return { rel: c };
  const where = spec.startsWith(".") ? "in the package" : "in the snapshot's node_modules";
  return { reason: blockReason("tsconfig_extends_unresolved", `${fromRel} extends "${spec}", which is not a file ${where}.`, fromRel) };
}

function outputPath(value: unknown, fromRel: string): string | undefined {
  if (typeof value !== "string") return undefined;
  const dir = posix.dirname(fromRel);
  const v = value.replace(/^\$\{configDir\}/, ".");
  if (v.startsWith("/")) return `/${v}`;
  return posix.normalize(posix.join(dir, v)).replace(/\/$/, "");
}

/**
 * Reads a tsconfig and, recursively, what it `extends` (relative paths inside the package, or a
 * package inside the snapshot's node_modules). Reports invalid JSON, unresolvable or escaping
 * `extends`, cycles, project `references` (not supported: `tsc --project` would need their
 * outputs) and returns the effective outDir/noEmit (nearest definition wins, each resolved
 * relative to the config that declares it).
 */
export async function inspectTsconfigChain(start: string, reader: TsconfigReader): Promise<TsconfigChain> {
  const files: string[] = [];
  const reasons: BlockReason[] = [];
  let outDir: string | undefined;
  let outDirSet = false;
  let noEmit: boolean | undefined;
  const extraOutputs: { key: string; path: string; from: string }[] = [];

  const visit = async (rel: string, depth: number, stack: readonly string[]): Promise<void> => {
    if (stack.includes(rel)) {
      reasons.push(blockReason("tsconfig_extends_cycle", `${rel} extends itself through ${stack.join(" → ")}.`, rel));
      return;
    }
    if (depth > MAX_DEPTH) {
      reasons.push(blockReason("tsconfig_extends_cycle", `The extends chain of ${start} is deeper than ${MAX_DEPTH}.`, rel));
      return;
    }
    if (!files.includes(rel)) files.push(rel);
    const parsed = parseTsconfigText((await reader.read(rel)).toString("utf8"));
    if (!parsed.value) {
      reasons.push(blockReason("tsconfig_invalid", `${rel} is not valid tsconfig JSON: ${parsed.error ?? "unknown error"}.`, rel));
      return;
    }
    const config = parsed.value;
    if (Array.isArray(config.references) && config.references.length > 0) {
      reasons.push(blockReason("tsconfig_references_not_supported", `${rel} has project references; tsc --project does not build them, so they are not supported.`, rel));
    }
    const options = typeof config.compilerOptions === "object" && config.compilerOptions !== null ? config.compilerOptions : {};
    // The config nearer the start wins: only take values not already set by a child.
    if (!outDirSet && "outDir" in options) {
      outDir = outputPath(options.outDir, rel);
      outDirSet = true;
    }
    if (noEmit === undefined && typeof options.noEmit === "boolean") noEmit = options.noEmit;
    for (const key of ["outFile", "out", "declarationDir", "tsBuildInfoFile"]) {
      const p = outputPath(options[key], rel);
      if (p !== undefined && !extraOutputs.some((e) => e.key === key)) extraOutputs.push({ key, path: p, from: rel });
    }
    const ext = config.extends;
    const specs = typeof ext === "string" ? [ext] : Array.isArray(ext) ? ext : ext === undefined ? [] : [null];
    // tsc applies an array of bases left to right, later ones overriding earlier ones.
    for (const spec of [...specs].reverse()) {
      if (typeof spec !== "string") {
        reasons.push(blockReason("tsconfig_invalid", `${rel} has an "extends" that is not a string or an array of strings.`, rel));
        continue;
      }
      const r = resolveExtends(spec, rel, reader);
      if (r.reason) reasons.push(r.reason);
      else if (r.rel) await visit(r.rel, depth + 1, [...stack, rel]);
    }
  };
  await visit(start, 0, []);

  // An unreadable or unresolved chain has no trustworthy outDir: report only what broke.
  if (reasons.length > 0) return { files, outDir: undefined, noEmit: noEmit === true, reasons };
  if (noEmit !== true) {
    if (outDir === undefined) {
      reasons.push(blockReason("build_output_undeclared", `${start} declares no compilerOptions.outDir; build output must go to a declared job-local directory.`, start));
    } else if (outDir.startsWith("/") || outDir === ".." || outDir.startsWith("../") || outDir === "." || outDir === "") {
      reasons.push(blockReason("build_output_dir_invalid", `The outDir of ${start} (${outDir}) must be a directory inside the package, not the package root or outside it.`, start));
      outDir = undefined;
    } else if (outDir.split("/").some((s) => s === "node_modules" || s === ".git")) {
      reasons.push(blockReason("build_output_dir_invalid", `The outDir of ${start} (${outDir}) is inside node_modules or .git.`, start));
      outDir = undefined;
    }
  }
  for (const extra of extraOutputs) {
    if (extra.key === "outFile" || extra.key === "out") {
      reasons.push(blockReason("build_output_dir_invalid", `${extra.from} sets ${extra.key}; only an outDir build output is supported.`, extra.from));
    } else if (noEmit !== true && outDir !== undefined && !(extra.path === outDir || extra.path.startsWith(`${outDir}/`))) {
      reasons.push(blockReason("build_output_dir_invalid", `${extra.from} sets ${extra.key} to ${extra.path}, outside the declared outDir ${outDir}.`, extra.from));
    }
  }
  return { files, outDir: noEmit === true ? undefined : outDir, noEmit: noEmit === true, reasons };
}
