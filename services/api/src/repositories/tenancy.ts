import { Code } from "@connectrpc/connect";
import { SeraphError } from "@seraph/kit";
import type { SandboxSettings } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { isUnder } from "../common.js";
import type { RepositoryRow } from "./repository.repository.js";

/** Where a repository is on its node: the resolved real path and the directory identities (own first, then ancestors). */
export interface RepositoryPlace {
  readonly realPath: string;
  readonly directoryIds: readonly string[];
}

/**
 * The repository roots an operator root may register under: the ones the instance operator
 * assigned to it in the settings, else the global list.
 */
export function repositoryRootsFor(settings: SandboxSettings, rootId: string): readonly string[] {
  const assigned = settings.rootRepositoryRoots.find((e) => e.rootId === rootId);
  return assigned ? assigned.repositoryRoots : settings.repositoryRoots;
}

/** The place a stored row records (rows from before the tenancy columns have only their path). */
export function placeOf(row: RepositoryRow): { realPath: string; directoryIds: readonly string[] | undefined } {
  let ids: string[] | undefined;
  if (row.directory_ids) {
    const parsed: unknown = JSON.parse(row.directory_ids);
    if (Array.isArray(parsed) && parsed.every((x) => typeof x === "string")) ids = parsed;
  }
  return { realPath: row.real_path ?? row.path, directoryIds: ids };
}

/**
 * True when two places overlap: the same directory, one inside the other, or one above the
 * other. Directory identities see through links and bind mounts; the real paths are compared too
 * (for rows recorded before identities existed).
 */
export function placesOverlap(a: RepositoryPlace, b: { realPath: string; directoryIds: readonly string[] | undefined }): boolean {
  if (isUnder(a.realPath, b.realPath) || isUnder(b.realPath, a.realPath)) return true;
  if (b.directoryIds === undefined || b.directoryIds.length === 0 || a.directoryIds.length === 0) return false;
  return a.directoryIds.includes(b.directoryIds[0]!) || b.directoryIds.includes(a.directoryIds[0]!);
}

/**
 * The refusal for a path that overlaps another operator root's repository. It says only that the
 * path is not allowed here: not whose it is, nor that anyone registered it.
 */
export function pathNotAllowed(): SeraphError {
  return new SeraphError(Code.PermissionDenied, "repository_path_not_allowed", "This repository path is not allowed here.", { field: "path" });
}
