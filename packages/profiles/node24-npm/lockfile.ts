/** The npm lockfile names, in npm's order of precedence. */
export const NPM_LOCKFILES = ["npm-shrinkwrap.json", "package-lock.json"] as const;

/** Lockfiles of other package managers: their presence means node_modules was not laid out by npm. */
export const FOREIGN_LOCKFILES = ["yarn.lock", "pnpm-lock.yaml", "bun.lockb", "bun.lock"] as const;

/** The part of an npm v2/v3 lockfile the profile reads. */
export interface NpmLock {
  readonly lockfileVersion: number;
  readonly packages: Readonly<Record<string, { readonly version?: string; readonly link?: boolean }>>;
}

/** Parses an npm lockfile; returns an error sentence for invalid JSON or a version before 2. */
export function parseNpmLock(text: string, name: string): { lock?: NpmLock; code?: "lockfile_invalid" | "lockfile_version_unsupported"; message?: string } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return { code: "lockfile_invalid", message: `${name} is not valid JSON (${(err as Error).message}).` };
  }
  if (typeof value !== "object" || value === null) return { code: "lockfile_invalid", message: `${name} is not a JSON object.` };
  const v = value as { lockfileVersion?: unknown; packages?: unknown };
  if (typeof v.lockfileVersion !== "number" || v.lockfileVersion < 2 || typeof v.packages !== "object" || v.packages === null) {
    return {
      code: "lockfile_version_unsupported",
      message: `${name} has lockfileVersion ${String(v.lockfileVersion)}; the profile reads only lockfileVersion 2 or 3 (npm 7 and later), which record every installed path.`,
    };
  }
  return { lock: { lockfileVersion: v.lockfileVersion, packages: v.packages as NpmLock["packages"] } };
}
