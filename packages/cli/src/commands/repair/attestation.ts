import { writeFile } from "node:fs/promises";
import { toJson } from "@bufbuild/protobuf";
import { ArtifactSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import { readVerifiedArtifact } from "../../artifact-read.js";
import type { Command } from "../../command-spec.js";
import { str } from "../../context.js";
import { statusOf } from "../../format.js";
import { CliFailure } from "../../io.js";
import { REPAIR_ID, repairArg } from "./shared.js";

/** The kind of the artifact that holds a job's signed receipt (a DSSE envelope). */
export const ATTESTATION_KIND = "attestation";

/** `seraph repair attestation`: the signed receipt of the repair's job, sha256-checked, for `seraph verify`. */
export const attestation: Command = {
  spec: {
    name: "repair attestation",
    summary: "Download the signed receipt of the repair's job: a DSSE envelope over an in-toto Statement naming every artifact by sha256, signed by the node's key.",
    args: [REPAIR_ID],
    flags: { output: { type: "string", value: "FILE", help: "write the envelope to FILE instead of stdout", defaultText: "stdout" } },
    notes: [
      "The envelope is read through ReadArtifact (the artifact of kind attestation, attestation.intoto.json) and its sha256 checked against the recorded one, like artifact get.",
      "Check it offline with `seraph verify FILE --key node-key.pub` (node-key.pub is in the executor node's data directory), or with jq, base64 and openssl (README: Verifying a receipt).",
      "Exit status 1 when the repair has no job, the job has no attestation yet (a node signs one when the job reaches a verdict), or the bytes do not match their recorded sha256. With --json: {artifact, envelope}.",
    ],
  },
  async run(ctx, { values, positionals }) {
    const api = await ctx.api();
    const repairId = await repairArg(ctx, positionals);
    const repair = (await api.repairs.getRepair({ repairId })).repair!;
    const id8 = repair.id.slice(0, 8);
    if (!repair.job) throw new CliFailure(`repair ${id8} has no job (status ${statusOf(repair)}), so nothing was signed`);
    const wanted = repair.job.artifacts.find((a) => a.kind === ATTESTATION_KIND);
    if (!wanted) throw new CliFailure(`job ${repair.job.id} of repair ${id8} has no attestation (status ${statusOf(repair)}): its node signs one when the job reaches a verdict`);
    const { meta, content, sha256 } = await readVerifiedArtifact(api, repair.id, wanted);
    const output = str(values, "output");
    if (ctx.json) {
      ctx.io.stdout.write(`${JSON.stringify({ artifact: toJson(ArtifactSchema, meta, { alwaysEmitImplicit: true }), envelope: JSON.parse(Buffer.from(content).toString("utf8")) as unknown })}\n`);
    } else if (output !== undefined) {
      await writeFile(output, content);
      ctx.io.stderr.write(`wrote ${meta.name} of job ${repair.job.id} (${content.length} B, sha256 ${sha256} verified) to ${output}\nnext: seraph verify ${output} --key NODE_KEY_PUB [--artifacts DIR]\n`);
    } else {
      await ctx.bytes(content);
    }
    return 0;
  },
};
