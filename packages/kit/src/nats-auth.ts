import { readFile } from "node:fs/promises";
import { credsAuthenticator, type ConnectionOptions } from "@nats-io/transport-node";
import type { EnvReader } from "./config.js";

/**
 * How a service authenticates to NATS. NATS is an authenticated plane: the server refuses
 * anonymous connections and grants each service user only the subjects it needs (see
 * {@link natsPermissions}). User and password is the documented default; a creds file
 * (JWT + nkey seed, as `nsc` writes it) is the alternative for operator-mode servers.
 */
export type NatsAuth = { readonly user: string; readonly password: string } | { readonly credsFile: string };

/**
 * Reads the NATS credentials from `NATS_USER` + `NATS_PASSWORD` (the default) or
 * `NATS_CREDS_FILE` (absolute path). Exactly one of the two forms is required; the spec key it
 * is registered under is not itself read (conventionally `NATS_AUTH`).
 */
export function natsAuth(): EnvReader<NatsAuth> {
  return (env, _name, problems) => {
    const v = (k: string) => (env[k] === undefined || env[k] === "" ? undefined : env[k]);
    const user = v("NATS_USER");
    const password = v("NATS_PASSWORD");
    const credsFile = v("NATS_CREDS_FILE");
    if (credsFile !== undefined) {
      if (user !== undefined || password !== undefined) problems.push("set either NATS_USER/NATS_PASSWORD or NATS_CREDS_FILE, not both");
      if (!credsFile.startsWith("/")) problems.push(`NATS_CREDS_FILE must be an absolute path, got ${JSON.stringify(credsFile)}`);
      return { credsFile };
    }
    if (user === undefined && password === undefined) {
      problems.push("NATS_USER and NATS_PASSWORD (or NATS_CREDS_FILE) are required: the NATS server must refuse anonymous connections");
    } else if (user === undefined) {
      problems.push("NATS_USER is required with NATS_PASSWORD");
    } else if (password === undefined) {
      problems.push("NATS_PASSWORD is required with NATS_USER");
    }
    return { user: user ?? "", password: password ?? "" };
  };
}

/** The nats.js connection options for `auth` (reads the creds file when there is one). */
export async function natsAuthOptions(auth: NatsAuth): Promise<Pick<ConnectionOptions, "user" | "pass" | "authenticator">> {
  if ("credsFile" in auth) return { authenticator: credsAuthenticator(await readFile(auth.credsFile)) };
  return { user: auth.user, pass: auth.password };
}

/** Publish and subscribe permissions of one NATS user (nats-server `permissions` block). */
export interface NatsPermissions {
  readonly publish: readonly string[];
  readonly subscribe: readonly string[];
  /** Whether the user may publish to the reply subject of a request it received (and only that). */
  readonly allowResponses: boolean;
}

/** The NATS users of a Seraph deployment. */
export type NatsRole = "jobs" | "api" | "executor" | "ops";

/**
 * The least subjects each Seraph NATS user needs (the deployment's nats-server config grants
 * exactly these):
 *
 * - `jobs` publishes job, slot, node and queue signals and hears the queue wake-up;
 * - `api` publishes repair events and token revocations (`seraph.tokens.<id>.revoked`, which
 *   every API replica hears to end the token's open streams), hears repair and job events, and
 *   hosts the operator micro services (`seraph.operator.*` and the `$SRV.*` discovery subjects),
 *   answering on inbox reply subjects only;
 * - `executor` (one user per node) hears only its own node's work and cancel signals and
 *   publishes nothing;
 * - `ops` (operator tooling, `seraph ops`) sends requests to the operator services and
 *   discovery subjects and reads replies on `_INBOX.>`. It sees no events.
 */
export function natsPermissions(role: NatsRole, nodeId = "*"): NatsPermissions {
  switch (role) {
    case "jobs":
      return {
        publish: ["seraph.jobs.*.state", "seraph.slots.*.*", "seraph.nodes.*.work", "seraph.nodes.*.cancel", "seraph.work.queued"],
        subscribe: ["seraph.work.queued"],
        allowResponses: false,
      };
    case "api":
      return {
        publish: ["seraph.repairs.*.state", "seraph.tokens.*.revoked"],
        subscribe: ["seraph.repairs.*.state", "seraph.jobs.*.state", "seraph.tokens.*.revoked", "seraph.operator.>", "$SRV.>"],
        allowResponses: true,
      };
    case "executor":
      return { publish: [], subscribe: [`seraph.nodes.${nodeId}.work`, `seraph.nodes.${nodeId}.cancel`], allowResponses: false };
    case "ops":
      return { publish: ["seraph.operator.>", "$SRV.>"], subscribe: ["_INBOX.>"], allowResponses: false };
  }
}

/** One user of {@link renderNatsAuthorization}. */
export interface NatsUserEntry {
  readonly user: string;
  readonly password: string;
  readonly permissions: NatsPermissions;
}

/**
 * A nats-server `authorization { users = [...] }` block granting each user exactly its
 * permissions. With it, the server refuses anonymous connections (there is no `no_auth_user`).
 */
export function renderNatsAuthorization(users: readonly NatsUserEntry[]): string {
  const list = (xs: readonly string[]) => `[${xs.map((x) => JSON.stringify(x)).join(", ")}]`;
  const lines = users.map((u) => {
    const p = u.permissions;
    // An empty allow list would mean "everything" to nats-server; deny all instead.
    const pub = p.publish.length > 0 ? `allow: ${list(p.publish)}` : `deny: [">"]`;
    const sub = p.subscribe.length > 0 ? `allow: ${list(p.subscribe)}` : `deny: [">"]`;
    const resp = p.allowResponses ? ", allow_responses: { max: 1 }" : "";
    return `    { user: ${JSON.stringify(u.user)}, password: ${JSON.stringify(u.password)}, permissions: { publish: { ${pub} }, subscribe: { ${sub} }${resp} } }`;
  });
  return `authorization {\n  users = [\n${lines.join("\n")}\n  ]\n}\n`;
}
