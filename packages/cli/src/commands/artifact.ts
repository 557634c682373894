import { writeFile } from "node:fs/promises";
import { toJson } from "@bufbuild/protobuf";
import { ArtifactSchema } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { CommandGroup } from "../command-spec.js";
import { str } from "../context.js";
import { readVerifiedArtifact } from "../artifact-read.js";
import { artifactOf, repairId } from "../resolve.js";

const REPAIR_ID = { name: "REPAIR_ID", help: "the repair's id (or a unique prefix)" } as const;

/** `seraph artifact ls|get`: a job's stored evidence (outputs, receipts, the applied diff). */
export const artifact: CommandGroup = {
  name: "artifact",
  summary: "List and fetch a repair's job artifacts (step outputs, receipts), sha256-verified.",
  subcommands: {
    ls: {
      spec: { name: "artifact ls", summary: "List the artifacts of a repair's job (id, kind, name, size, sha256, read back).", args: [REPAIR_ID] },
      async run(ctx, { positionals }) {
        const api = await ctx.api();
        const repair = (await api.repairs.getRepair({ repairId: await repairId(api, positionals[0] as string) })).repair!;
        const list = repair.job?.artifacts ?? [];
        if (ctx.json) ctx.io.stdout.write(`${JSON.stringify({ artifacts: list.map((a) => toJson(ArtifactSchema, a, { alwaysEmitImplicit: true })) })}\n`);
        if (!repair.job) ctx.say("no artifacts (the repair has no job)");
        else if (list.length === 0) ctx.say("no artifacts (yet)");
        for (const a of list) ctx.say(`${a.id}  ${a.kind.padEnd(14)} ${a.name.padEnd(22)} ${String(a.size).padStart(9)} B  sha256 ${a.sha256}  ${a.readbackVerified ? "read back" : "NOT read back"}`);
        return 0;
      },
    },
    get: {
      spec: {
        name: "artifact get",
        summary: "Write one artifact's bytes to stdout (or --output FILE) after checking their sha256 against the recorded one.",
        args: [REPAIR_ID, { name: "ARTIFACT", help: "the artifact's id, a unique prefix of it, or its name (e.g. test.stdout)" }],
        flags: { output: { type: "string", value: "FILE", help: "write the bytes to FILE instead of stdout", defaultText: "stdout" } },
        notes: ["Exit status 1 when the bytes do not match the recorded sha256 (nothing is written)."],
      },
      async run(ctx, { values, positionals }) {
        const api = await ctx.api();
        const id = await repairId(api, positionals[0] as string);
        const repair = (await api.repairs.getRepair({ repairId: id })).repair!;
        const wanted = await artifactOf(repair, positionals[1] as string);
        const res = await readVerifiedArtifact(api, id, wanted);
        const { meta, sha256: actual } = res;
        const output = str(values, "output");
        if (ctx.json) {
          ctx.io.stdout.write(`${JSON.stringify({ artifact: toJson(ArtifactSchema, meta, { alwaysEmitImplicit: true }), content: Buffer.from(res.content).toString("base64") })}\n`);
        } else if (output !== undefined) {
          await writeFile(output, res.content);
          ctx.io.stderr.write(`wrote ${meta.name} (${res.content.length} B, sha256 ${actual} verified) to ${output}\n`);
        } else {
          await ctx.bytes(res.content);
        }
        return 0;
      },
    },
  },
};
