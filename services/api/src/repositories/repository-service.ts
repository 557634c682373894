import { basename } from "node:path";
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { FailedPreconditionError, InvalidArgumentError, newId, requirePrincipal } from "@seraph/kit";
import { RepositorySchema, RepositoryService, type Repository, type SandboxSettings } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { Kysely } from "kysely";
import { isNormalizedAbsolute, isUnder, unixMs } from "../common.js";
import type { ApiDatabase } from "../db/schema.js";
import type { ApiLimiters } from "../limits.js";
import { callNode, type NodeDirectory } from "../nodes/node-directory.js";
import { loadSettings } from "../settings/settings.repository.js";
import { insertRepositoryOnce, listOwnedRepositories, type RepositoryRow } from "./repository.repository.js";

/** The Repository message of a row. */
export function repositoryMessage(row: RepositoryRow): Repository {
  return create(RepositorySchema, { id: row.id, ownerId: row.owner_id, nodeId: row.node_id, path: row.path, name: row.name, createdUnixMs: unixMs(row.created_at) });
}

/**
 * Repositories, visible only to their owner. A path is accepted when it is absolute and normalized,
 * under a repository root of the settings (when the operator configured any), and the executor
 * node confirms it is an existing directory under one of the node's own roots. Nothing in the
 * repository is read or written here.
 */
export function createRepositoryService(deps: { db: Kysely<ApiDatabase>; nodes: NodeDirectory; defaults: () => SandboxSettings; limiters: ApiLimiters }): ServiceImpl<typeof RepositoryService> {
  const { db, nodes } = deps;
  return {
    async registerRepository(req, ctx) {
      const p = requirePrincipal(ctx);
      await deps.limiters.repositories.consume(p.id);
      if (!isNormalizedAbsolute(req.path)) {
        throw new InvalidArgumentError("path", "path_not_normalized", `The repository path "${req.path}" must be absolute and normalized (no "..", ".", "//" or trailing "/").`);
      }
      const { settings } = await loadSettings(db, deps.defaults);
      if (settings.repositoryRoots.length > 0 && !settings.repositoryRoots.some((r) => isUnder(req.path, r))) {
        throw new FailedPreconditionError("outside_repository_roots", `${req.path} is not under a configured repository root (${settings.repositoryRoots.join(", ")}).`, { field: "path" });
      }
      const node = await nodes.choose(req.nodeId);
      const check = await callNode(node, "check the repository", () => nodes.executor(node).checkRepository({ repositoryPath: req.path }, { timeoutMs: 10_000 }));
      if (!check.ok) throw new FailedPreconditionError(check.code || "repository_refused", check.message, { field: "path" });
      const row = await insertRepositoryOnce(db, { id: newId(), owner_id: p.id, node_id: node.nodeId, path: req.path, name: req.name || basename(req.path) });
      return { repository: repositoryMessage(row) };
    },
    async listRepositories(_req, ctx) {
      const p = requirePrincipal(ctx);
      return { repositories: (await listOwnedRepositories(db, p.id)).map(repositoryMessage) };
    },
  };
}
