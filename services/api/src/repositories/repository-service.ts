import { basename } from "node:path";
import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import { FailedPreconditionError, InvalidArgumentError, newId, requirePrincipal, UnavailableError } from "@seraph/kit";
import { RepositorySchema, RepositoryService, type Repository, type SandboxSettings } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import type { Kysely } from "kysely";
import { isNormalizedAbsolute, isUnder, unixMs } from "../common.js";
import type { ApiDatabase } from "../db/schema.js";
import type { ApiLimiters } from "../limits.js";
import { callNode, type NodeDirectory } from "../nodes/node-directory.js";
import { loadSettings } from "../settings/settings.repository.js";
import { insertRepositoryOnce, listOtherRootsRepositories, listOwnedRepositories, lockNodeRepositories, type RepositoryRow } from "./repository.repository.js";
import { pathNotAllowed, placeOf, placesOverlap, repositoryRootsFor } from "./tenancy.js";

/** The Repository message of a row. */
export function repositoryMessage(row: RepositoryRow): Repository {
  return create(RepositorySchema, { id: row.id, ownerId: row.owner_id, nodeId: row.node_id, path: row.path, name: row.name, createdUnixMs: unixMs(row.created_at) });
}

/**
 * Repositories, visible only to their owner. A path is accepted when it is absolute and normalized,
 * under the caller's repository roots (those the instance operator assigned to its operator root,
 * else the global list; both as written and after the node resolved its links), the executor
 * node confirms it is an existing directory under one of the node's own roots, and it overlaps no
 * other operator root's repository (same directory, inside or above, through links and bind
 * mounts: PERMISSION_DENIED repository_path_not_allowed, naming nobody). Nothing in the
 * repository is read or written here.
 */
export function createRepositoryService(deps: { db: Kysely<ApiDatabase>; nodes: NodeDirectory; defaults: () => SandboxSettings; limiters: ApiLimiters }): ServiceImpl<typeof RepositoryService> {
  const { db, nodes } = deps;
  return {
    async registerRepository(req, ctx) {
      const p = requirePrincipal(ctx);
      await deps.limiters.repositories.consume(p);
      if (!isNormalizedAbsolute(req.path)) {
        throw new InvalidArgumentError("path", "path_not_normalized", `The repository path "${req.path}" must be absolute and normalized (no "..", ".", "//" or trailing "/").`);
      }
      const { settings } = await loadSettings(db, deps.defaults);
      const roots = repositoryRootsFor(settings, p.rootId);
      const outside = (path: string) => roots.length > 0 && !roots.some((r) => isUnder(path, r));
      if (outside(req.path)) {
        throw new FailedPreconditionError("outside_repository_roots", `${req.path} is not under a repository root of yours (${roots.join(", ")}).`, { field: "path" });
      }
      const node = await nodes.choose(req.nodeId);
      const check = await callNode(node, "check the repository", () => nodes.executor(node).checkRepository({ repositoryPath: req.path }, { timeoutMs: 10_000 }));
      if (!check.ok) throw new FailedPreconditionError(check.code || "repository_refused", check.message, { field: "path" });
      if (check.realPath === "" || check.directoryIds.length === 0) {
        throw new UnavailableError("node_unavailable", `The executor node ${node.nodeId} did not say where ${req.path} really is (an older executor?); upgrade it and retry.`);
      }
      // A link under one's own root must not lead into another root's directories.
      if (outside(check.realPath)) {
        throw new FailedPreconditionError("outside_repository_roots", `${req.path} resolves outside your repository roots (${roots.join(", ")}).`, { field: "path" });
      }
      const place = { realPath: check.realPath, directoryIds: check.directoryIds };
      const row = await db.transaction().execute(async (trx) => {
        await lockNodeRepositories(trx, node.nodeId, check.hostId);
        // The directory belongs to the operator root that registered it first: no other root may
        // register it, a directory inside it or one above it, by any spelling.
        for (const other of await listOtherRootsRepositories(trx, node.nodeId, check.hostId, p.rootId)) {
          if (placesOverlap(place, placeOf(other))) throw pathNotAllowed();
        }
        return insertRepositoryOnce(trx, {
          id: newId(),
          owner_id: p.id,
          node_id: node.nodeId,
          path: req.path,
          name: req.name || basename(req.path),
          real_path: check.realPath,
          directory_ids: JSON.stringify(check.directoryIds),
          host_id: check.hostId,
        });
      });
      return { repository: repositoryMessage(row) };
    },
    async listRepositories(_req, ctx) {
      const p = requirePrincipal(ctx);
      return { repositories: (await listOwnedRepositories(db, p.id)).map(repositoryMessage) };
    },
  };
}
