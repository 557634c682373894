import { readFile } from "node:fs/promises";
import { basename, join } from "node:path";
import { AttestationError, JOB_RECEIPT_PREDICATE_TYPE, verifyJobReceipt, type JobReceiptPredicate, type Statement } from "@seraph/attestation";
import type { Command } from "../command-spec.js";
import { str, type CommandContext } from "../context.js";
import { UsageError } from "../io.js";

/** A subject name that is one plain file name, so it can be looked up in a directory and nowhere else. */
function plainName(name: string): boolean {
  return name !== "" && name !== "." && name !== ".." && !/[/\\\0]/.test(name);
}

/**
 * The artifacts to check: every subject of the statement from `dir` (each must be there), and each
 * named file under its base name (which the verifier requires to be a subject).
 */
async function artifactsToCheck(statement: Statement<JobReceiptPredicate>, dir: string | undefined, files: readonly string[]): Promise<Map<string, Uint8Array>> {
  const out = new Map<string, Uint8Array>();
  if (dir !== undefined) {
    for (const s of statement.subject) {
      if (!plainName(s.name)) throw new AttestationError("subject_name_unsafe", `The attestation names a subject ${JSON.stringify(s.name)} that is not a plain file name; it is not looked up in ${dir}.`);
      let bytes: Uint8Array;
      try {
        bytes = await readFile(join(dir, s.name));
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== "ENOENT") throw err;
        throw new AttestationError("subject_file_missing", `Artifact ${s.name} (a subject of the attestation) is not in ${dir}: every subject must be there with --artifacts.`);
      }
      out.set(s.name, bytes);
    }
  }
  const named = new Set<string>();
  for (const file of files) {
    const name = basename(file);
    if (named.has(name)) throw new UsageError(`two files named ${name}: each artifact is checked under its own name`);
    named.add(name);
    // A file named on the command line is checked as given, in place of the directory's copy.
    out.set(name, await readFile(file));
  }
  return out;
}

function cleanupText(c: JobReceiptPredicate["cleanup"] | undefined): string {
  if (!c) return "not stated";
  const cgroup = c.cgroupEmpty === null ? "no cgroup" : c.cgroupEmpty ? "cgroup populated 0" : "cgroup NOT empty";
  return `${c.echildObserved ? "ECHILD observed" : "ECHILD NOT observed"}; ${cgroup}; ${c.leftovers} leftover process${c.leftovers === 1 ? "" : "es"} killed and reaped`;
}

/** The human summary of a verified receipt: who signed it, what it says, which subjects were checked. */
function summary(statement: Statement<JobReceiptPredicate>, keyid: string, checked: ReadonlySet<string>): string {
  const p = statement.predicate;
  const rows: [string, string][] = [
    ["node", `${p.node?.nodeId ?? "?"} (boot ${p.node?.bootId ?? "?"})`],
    ["key", `sha256 ${keyid} (the statement's key fingerprint matches)`],
    ["job", `${p.jobId} attempt ${p.attempt} of repair ${p.repairId}`],
    ["approval", `document sha256 ${p.approvalDocumentSha256}`],
    ["inspection", `sha256 ${p.inspectionSha256}`],
    ["outcome", `${p.outcome}${p.reason ? ` (${p.reason})` : ""}`],
    ["cleanup", cleanupText(p.cleanup)],
    ["finished", p.finishedUnixMs ? new Date(p.finishedUnixMs).toISOString() : "?"],
  ];
  const lines = ["signature valid: a DSSE envelope over an in-toto Statement, signed by the node's key", ...rows.map(([k, v]) => `  ${k.padEnd(10)}  ${v}`)];
  lines.push(`  subjects    ${statement.subject.length}, ${checked.size === 0 ? "none checked (give --artifacts DIR or the artifact files)" : `${checked.size} checked against the files`}`);
  for (const s of statement.subject) lines.push(`    ${s.name.padEnd(24)} sha256 ${s.digest.sha256}  ${checked.has(s.name) ? "matches" : "not checked"}`);
  return `${lines.join("\n")}\n`;
}

/** Verifies; throws AttestationError with the first problem. */
async function verifyFiles(file: string, keyFile: string, dir: string | undefined, files: readonly string[]) {
  const [envelope, key] = await Promise.all([readFile(file, "utf8"), readFile(keyFile, "utf8")]);
  // The signature and the statement first: the subjects to look up come from the signed statement only.
  const { statement } = verifyJobReceipt(envelope, key);
  const artifacts = await artifactsToCheck(statement, dir, files);
  const { keyid } = verifyJobReceipt(envelope, key, artifacts);
  const stated = statement.predicate.node?.keyFingerprint;
  if (stated !== keyid) {
    throw new AttestationError("key_fingerprint_mismatch", `The statement says its node signs with key ${stated ?? "(none)"}, but it verifies with key ${keyid}.`);
  }
  return { statement, keyid, checked: new Set(artifacts.keys()) };
}

function refused(ctx: CommandContext, e: AttestationError): number {
  if (ctx.json) ctx.io.stderr.write(`${JSON.stringify({ error: { reason: e.reason, message: e.message } })}\n`);
  else ctx.io.stderr.write(`seraph verify: NOT VERIFIED: ${e.reason}: ${e.message}\n`);
  return 1;
}

/** `seraph verify FILE --key NODE_PUB [--artifacts DIR] [ARTIFACT...]`: a signed job receipt, checked offline. */
export const verify: Command = {
  spec: {
    name: "verify",
    summary: "Verify a signed job receipt offline (no network, no server): the DSSE signature against the node's public key, the in-toto Statement, and each artifact's sha256.",
    args: [
      { name: "FILE", help: "the attestation, as `seraph repair attestation` writes it (attestation.intoto.json)" },
      { name: "ARTIFACT", variadic: true, help: "an artifact file to check; its base name must be a subject of the statement" },
    ],
    flags: {
      key: { type: "string", value: "NODE_PUB", required: true, help: "the node's Ed25519 public key, PEM (node-key.pub in the executor node's data directory)" },
      artifacts: { type: "string", value: "DIR", help: "a directory with the job's artifacts under their names: every subject must be there, with its sha256", defaultText: "only the ARTIFACT files given" },
    },
    notes: [
      "Prints the statement's node, key fingerprint, job, approval document digest, outcome and cleanup proof, and for each subject whether its file matched. With --json: {valid, keyid, predicateType, predicate, subjects}.",
      "Exit status 0 when the signature, the statement and every checked artifact are valid; 1 otherwise (NOT VERIFIED: reason: message, on stderr; with --json {\"error\":{\"reason\",\"message\"}}), or when a file cannot be read.",
    ],
  },
  async run(ctx, { values, positionals }) {
    const [file, ...files] = positionals as [string, ...string[]];
    let verified;
    try {
      verified = await verifyFiles(file, str(values, "key") as string, str(values, "artifacts"), files);
    } catch (err) {
      if (err instanceof AttestationError) return refused(ctx, err);
      throw err;
    }
    const { statement, keyid, checked } = verified;
    if (ctx.json) {
      const subjects = statement.subject.map((s) => ({ name: s.name, sha256: s.digest.sha256, checked: checked.has(s.name) }));
      ctx.io.stdout.write(`${JSON.stringify({ valid: true, keyid, predicateType: JOB_RECEIPT_PREDICATE_TYPE, predicate: statement.predicate, subjects })}\n`);
    } else {
      ctx.io.stdout.write(summary(statement, keyid, checked));
    }
    return 0;
  },
};
