import { RepairState, RepairView, type Repair } from "@seraph/proto/seraph/api/v1/repairs_pb.js";
import type { Artifact } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";
import type { Api } from "./client.js";
import { enumName, statusOf } from "./format.js";
import { resolveId } from "./ids.js";

/** A repair id from a full id or a unique prefix of one of the caller's repairs. */
export async function repairId(api: Api, given: string): Promise<string> {
  return resolveId(
    "repair",
    given,
    async () => (await allRepairSummaries(api)).map((r) => ({ id: r.id, label: `${statusOf(r)}  ${enumName(RepairState, r.state).toLowerCase()}  created ${new Date(Number(r.createdUnixMs)).toISOString()}` })),
    "`seraph repair list` shows your repairs",
  );
}

/** Every repair of the caller as a summary (page by page), for resolving an id prefix. */
async function allRepairSummaries(api: Api): Promise<Repair[]> {
  const out: Repair[] = [];
  let pageToken = "";
  do {
    const res = await api.repairs.listRepairs({ goalId: "", view: RepairView.SUMMARY, pageToken });
    out.push(...res.repairs);
    pageToken = res.nextPageToken ?? "";
  } while (pageToken !== "");
  return out;
}

/** A goal id from a full id or a unique prefix of one of the caller's goals (archived included). */
export async function goalId(api: Api, given: string): Promise<string> {
  return resolveId(
    "goal",
    given,
    async () => (await api.goals.listGoals({ includeArchived: true })).goals.map((g) => ({ id: g.id, label: `rev ${g.revision}  ${g.title}` })),
    "`seraph goal list --all` shows your goals",
  );
}

/** A repository id from a full id, a unique prefix, or a unique registered name. */
export async function repositoryId(api: Api, given: string): Promise<string> {
  return resolveId(
    "repository",
    given,
    async () => (await api.repositories.listRepositories({})).repositories.map((r) => ({ id: r.id, label: `${r.nodeId}  ${r.path}`, names: [r.name] })),
    "`seraph repo list` shows the registered repositories",
  );
}

/** A token id from a full id or a unique prefix of one of the caller's tokens. */
export async function tokenId(api: Api, given: string): Promise<string> {
  return resolveId(
    "token",
    given,
    async () => (await api.principals.listTokens({})).tokens.map((t) => ({ id: t.id, label: `${t.prefix}…  ${t.name}` })),
    "`seraph token list` shows your tokens",
  );
}

/** A proposal id of `repair` from a full id or a unique prefix. */
export async function proposalId(repair: Repair, given: string): Promise<string> {
  return resolveId(
    "proposal",
    given,
    async () => repair.proposals.map((p) => ({ id: p.id, label: `${p.valid ? "valid" : "invalid"}  ${p.changedPaths.join(", ")}` })),
    `\`seraph repair show ${repair.id.slice(0, 8)}\` lists its proposals`,
  );
}

/** An artifact of `repair`'s job from a full id, a unique prefix or its name (e.g. test.stdout). */
export async function artifactOf(repair: Repair, given: string): Promise<Artifact> {
  const artifacts = repair.job?.artifacts ?? [];
  const id = await resolveId(
    "artifact",
    given,
    async () => artifacts.map((a) => ({ id: a.id, label: `${a.kind}  ${a.name}`, names: [a.name] })),
    `\`seraph artifact ls ${repair.id.slice(0, 8)}\` lists its artifacts`,
  );
  const found = artifacts.find((a) => a.id === id);
  if (found) return found;
  // A full id that is not among the job's artifacts: the API answers NOT_FOUND precisely.
  return { id } as Artifact;
}
