import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** The default cgroup filesystem root; tests inject a temporary directory laid out like one. */
export const DEFAULT_CGROUP_FS_ROOT = "/sys/fs/cgroup";

/** A ceiling the host can enforce through a cgroup controller. */
export type CeilingName = "cpu" | "memory" | "pids";

/** Every ceiling, in the order the claims list them. */
export const CEILING_NAMES: readonly CeilingName[] = ["cpu", "memory", "pids"];

/** Where one controller lives: in the cgroup v2 hierarchy or in its own v1 hierarchy. */
export interface ControllerPlace {
  readonly version: 1 | 2;
  /** Mount point of the hierarchy holding the controller. */
  readonly mount: string;
}

/** How this host's cgroups are laid out. */
export interface CgroupLayout {
  /** "v2": a pure cgroup v2 host; "hybrid": a v2 `unified` mount beside v1 controller hierarchies. */
  readonly kind: "v2" | "hybrid";
  /** The cgroup v2 mount point (every process is in exactly one v2 cgroup). */
  readonly v2Mount: string;
  /** The ceilings the host can enforce and where their controllers are. */
  readonly controllers: ReadonlyMap<CeilingName, ControllerPlace>;
  /** One sentence per controller that is missing, and why. */
  readonly notes: readonly string[];
}

const V2_CONTROLLER: Record<CeilingName, string> = { cpu: "cpu", memory: "memory", pids: "pids" };
/**
 * The v1 hierarchy directory of each controller and a file that proves a v1 hierarchy is mounted
 * there (the root cgroup of a v1 hierarchy has no limit files of its own, e.g. no pids.max).
 */
const V1_PROBE: Record<CeilingName, readonly [string, string][]> = {
  cpu: [
    ["cpu", "cgroup.procs"],
    ["cpu,cpuacct", "cgroup.procs"],
  ],
  memory: [["memory", "cgroup.procs"]],
  pids: [["pids", "cgroup.procs"]],
};

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/**
 * Detects the cgroup layout under `fsRoot` (default /sys/fs/cgroup): a pure v2 host has
 * `cgroup.controllers` at the root; a hybrid host has it under `unified/` and mounts controllers
 * as v1 hierarchies beside it (`memory/`, `pids/`, `cpu/`). A controller listed by the v2
 * hierarchy is used there; otherwise its v1 hierarchy is used when mounted. Returns undefined when
 * there is no cgroup v2 at all (per-job cgroups need v2 for cgroup.kill and cgroup.events).
 */
export function detectCgroupLayout(fsRoot: string = DEFAULT_CGROUP_FS_ROOT): CgroupLayout | undefined {
  let kind: CgroupLayout["kind"];
  let v2Mount: string;
  if (existsSync(join(fsRoot, "cgroup.controllers"))) {
    kind = "v2";
    v2Mount = fsRoot;
  } else if (existsSync(join(fsRoot, "unified", "cgroup.controllers"))) {
    kind = "hybrid";
    v2Mount = join(fsRoot, "unified");
  } else {
    return undefined;
  }
  const v2Controllers = new Set((readText(join(v2Mount, "cgroup.controllers")) ?? "").trim().split(/\s+/).filter((c) => c !== ""));
  const controllers = new Map<CeilingName, ControllerPlace>();
  const notes: string[] = [];
  for (const name of CEILING_NAMES) {
    if (v2Controllers.has(V2_CONTROLLER[name])) {
      controllers.set(name, { version: 2, mount: v2Mount });
      continue;
    }
    const v1 = kind === "hybrid" ? V1_PROBE[name].find(([dir, file]) => existsSync(join(fsRoot, dir, file))) : undefined;
    if (v1 !== undefined) {
      controllers.set(name, { version: 1, mount: join(fsRoot, v1[0]) });
      continue;
    }
    notes.push(
      kind === "v2"
        ? `The ${name} controller is not in ${join(v2Mount, "cgroup.controllers")}.`
        : `The ${name} controller is neither in the v2 hierarchy nor mounted as a v1 hierarchy under ${fsRoot}.`,
    );
  }
  return { kind, v2Mount, controllers, notes };
}

/**
 * Parses /proc/<pid>/cgroup: "0::/path" is the v2 cgroup; "N:ctrl,ctrl:/path" the v1 ones.
 * Returns the v2 path and a map from each v1 controller name to its path.
 */
export function parseProcCgroup(text: string): { v2: string | undefined; v1: ReadonlyMap<string, string> } {
  let v2: string | undefined;
  const v1 = new Map<string, string>();
  for (const line of text.split("\n")) {
    const m = /^(\d+):([^:]*):(.*)$/.exec(line);
    if (m === null) continue;
    const [, id, ctrls, path] = m as unknown as [string, string, string, string];
    if (id === "0" && ctrls === "") v2 = path;
    else for (const c of ctrls.split(",")) if (c !== "") v1.set(c, path);
  }
  return { v2, v1 };
}

/** A cgroup directory the job owns in one hierarchy. */
export interface JobCgroupDir {
  readonly version: 1 | 2;
  readonly mount: string;
  /** Absolute directory of the job's cgroup in this hierarchy. */
  readonly dir: string;
  /** Absolute directory of the cgroup the supervisor came from in this hierarchy. */
  readonly home: string;
  /** The ceilings whose controller lives in this hierarchy. */
  readonly ceilings: readonly CeilingName[];
}

/** What to create: a job cgroup named `name` under `parent` in every hierarchy it needs. */
export interface JobCgroupRequest {
  readonly layout: CgroupLayout;
  /** Parent path relative to each hierarchy root, e.g. "/seraph". */
  readonly parent: string;
  /** The job cgroup's own name ([A-Za-z0-9_.-]). */
  readonly name: string;
  /** The ceilings to enforce and their values (absent or 0 = none for that resource). */
  readonly memoryBytes?: number;
  readonly pids?: number;
  readonly cpuMillicores?: number;
  /** /proc/self/cgroup text of the supervisor (where it returns after each spawn). */
  readonly selfCgroup: string;
}

/** The kernel's counters for a job cgroup. */
export interface CgroupCounters {
  readonly oomKills: number;
  readonly pidLimitHits: number;
  readonly memoryLimitHits: number;
  readonly memoryPeakBytes: number;
}

/** A cgroup operation that failed, with the file it touched. */
export class CgroupError extends Error {
  override readonly name = "CgroupError";
  /** @param path the cgroup file or directory; @param detail what went wrong */
  constructor(
    readonly path: string,
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(`${path}: ${detail}`, options);
  }
}

/** A cgroup path ("/" or "/a/b") under a mount, without a trailing slash. */
function under(mount: string, path: string): string {
  return path === "/" ? mount : join(mount, path);
}

/** cpu.max / cfs period: 100 ms (the kernel default). */
const CPU_PERIOD_US = 100_000;

function write(path: string, value: string): void {
  try {
    writeFileSync(path, value);
  } catch (err) {
    throw new CgroupError(path, `write ${JSON.stringify(value)} failed: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { cause: err });
  }
}

function counter(text: string | undefined, key: string): number {
  if (text === undefined) return 0;
  const m = new RegExp(`^${key}\\s+(\\d+)$`, "m").exec(text);
  return m?.[1] === undefined ? 0 : Number(m[1]);
}

function readNumber(path: string): number {
  const t = readText(path)?.trim();
  return t !== undefined && /^\d+$/.test(t) ? Number(t) : 0;
}

/**
 * One job's cgroups: a v2 cgroup (always: cgroup.kill and cgroup.events live there) plus, on a
 * hybrid host, a v1 cgroup in each controller hierarchy a requested ceiling needs. Every method is
 * synchronous: the spawn path moves the supervisor in, spawns and moves it out again without
 * yielding to the event loop, so nothing else of the supervisor runs while it is inside.
 */
export class JobCgroup {
  /** Every directory, the v2 one first. */
  readonly dirs: readonly JobCgroupDir[];
  /** The v2 directory (cgroup.kill, cgroup.events, cgroup.procs). */
  readonly v2: JobCgroupDir;
  /** The ceilings written to the kernel. */
  readonly enforced: readonly CeilingName[];
  #created: JobCgroupDir[] = [];
  #inside = false;

  private constructor(dirs: readonly JobCgroupDir[], enforced: readonly CeilingName[]) {
    this.dirs = dirs;
    this.v2 = dirs[0] as JobCgroupDir;
    this.enforced = enforced;
  }

  /**
   * Creates the job's cgroups and writes the ceilings (fails with CgroupError, after removing
   * what it created, when a directory or a ceiling cannot be written). On a pure v2 host the
   * needed controllers are enabled in `cgroup.subtree_control` of each ancestor below the mount.
   */
  static create(r: JobCgroupRequest): JobCgroup {
    const self = parseProcCgroup(r.selfCgroup);
    const wanted: CeilingName[] = [];
    if ((r.cpuMillicores ?? 0) > 0) wanted.push("cpu");
    if ((r.memoryBytes ?? 0) > 0) wanted.push("memory");
    if ((r.pids ?? 0) > 0) wanted.push("pids");
    const missing = wanted.filter((c) => !r.layout.controllers.has(c));
    if (missing.length > 0) throw new CgroupError(r.layout.v2Mount, `no controller for ${missing.join(", ")} on this host`);
    const v2Ceilings = wanted.filter((c) => r.layout.controllers.get(c)?.version === 2);
    const dirs: JobCgroupDir[] = [
      {
        version: 2,
        mount: r.layout.v2Mount,
        dir: join(r.layout.v2Mount, r.parent, r.name),
        home: under(r.layout.v2Mount, self.v2 ?? "/"),
        ceilings: v2Ceilings,
      },
    ];
    const v1Mounts = new Map<string, CeilingName[]>();
    for (const c of wanted) {
      const place = r.layout.controllers.get(c);
      if (place?.version !== 1) continue;
      v1Mounts.set(place.mount, [...(v1Mounts.get(place.mount) ?? []), c]);
    }
    for (const [mount, ceilings] of v1Mounts) {
      const ctrl = ceilings[0] === "cpu" ? "cpu" : (ceilings[0] as string);
      dirs.push({ version: 1, mount, dir: join(mount, r.parent, r.name), home: under(mount, self.v1.get(ctrl) ?? "/"), ceilings });
    }
    const cg = new JobCgroup(dirs, wanted);
    try {
      if (v2Ceilings.length > 0) {
        // cgroup v2 enables a controller for a cgroup's children through its subtree_control,
        // from the root down; the parent chain must hold no processes of its own.
        const enable = v2Ceilings.map((c) => `+${V2_CONTROLLER[c]}`).join(" ");
        let at = r.layout.v2Mount;
        for (const part of r.parent.split("/").filter((p) => p !== "")) {
          write(join(at, "cgroup.subtree_control"), enable);
          at = join(at, part);
          mkdirSync(at, { recursive: true });
        }
        write(join(at, "cgroup.subtree_control"), enable);
      }
      for (const d of dirs) {
        mkdirSync(join(d.dir, ".."), { recursive: true });
        try {
          mkdirSync(d.dir);
        } catch (err) {
          throw new CgroupError(d.dir, `mkdir failed: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { cause: err });
        }
        cg.#created.push(d);
        for (const c of d.ceilings) cg.#writeCeiling(d, c, r);
      }
    } catch (err) {
      cg.remove();
      throw err;
    }
    return cg;
  }

  #writeCeiling(d: JobCgroupDir, c: CeilingName, r: JobCgroupRequest): void {
    const at = (f: string): string => join(d.dir, f);
    if (c === "memory") {
      const bytes = String(r.memoryBytes);
      if (d.version === 2) {
        write(at("memory.max"), bytes);
        // No swap: the ceiling is on memory, and swapping past it would only slow the job down.
        if (existsSync(at("memory.swap.max"))) write(at("memory.swap.max"), "0");
      } else {
        write(at("memory.limit_in_bytes"), bytes);
        // memsw (memory + swap) must be >= limit_in_bytes; equal means no swap.
        if (existsSync(at("memory.memsw.limit_in_bytes"))) write(at("memory.memsw.limit_in_bytes"), bytes);
      }
    } else if (c === "pids") {
      write(at("pids.max"), String(r.pids));
    } else {
      const quota = Math.max(1000, Math.round(((r.cpuMillicores ?? 0) * CPU_PERIOD_US) / 1000));
      if (d.version === 2) write(at("cpu.max"), `${quota} ${CPU_PERIOD_US}`);
      else {
        write(at("cpu.cfs_period_us"), String(CPU_PERIOD_US));
        write(at("cpu.cfs_quota_us"), String(quota));
      }
    }
  }

  /** True while the calling process sits in the job's cgroups (between enter and leave). */
  get inside(): boolean {
    return this.#inside;
  }

  /** Moves process `pid` (all its threads) into every job cgroup. */
  enter(pid: number): void {
    this.#inside = true;
    for (const d of this.dirs) write(join(d.dir, "cgroup.procs"), String(pid));
  }

  /** Moves process `pid` back to the cgroups it came from; `inside` turns false only when all moves worked. */
  leave(pid: number): void {
    for (const d of this.dirs) write(join(d.home, "cgroup.procs"), String(pid));
    this.#inside = false;
  }

  /** cgroup.events says "populated 0": no process is left in the job's v2 cgroup (or below it). */
  populated(): boolean {
    const text = readText(join(this.v2.dir, "cgroup.events"));
    if (text === undefined) throw new CgroupError(join(this.v2.dir, "cgroup.events"), "unreadable");
    return counter(text, "populated") !== 0;
  }

  /** Writes 1 to cgroup.kill: SIGKILL to every process in the cgroup, forks in flight included. */
  kill(): void {
    if (this.#inside) throw new CgroupError(this.v2.dir, "refusing cgroup.kill while the supervisor is inside");
    write(join(this.v2.dir, "cgroup.kill"), "1");
  }

  /** The kernel's OOM-kill, pid-limit and memory counters for the job. */
  counters(): CgroupCounters {
    let oomKills = 0;
    let pidLimitHits = 0;
    let memoryLimitHits = 0;
    let memoryPeakBytes = 0;
    for (const d of this.dirs) {
      const at = (f: string): string => join(d.dir, f);
      if (d.ceilings.includes("memory")) {
        if (d.version === 2) {
          oomKills += counter(readText(at("memory.events")), "oom_kill");
          memoryPeakBytes = Math.max(memoryPeakBytes, readNumber(at("memory.peak")));
        } else {
          oomKills += counter(readText(at("memory.oom_control")), "oom_kill");
          memoryLimitHits += readNumber(at("memory.failcnt"));
          memoryPeakBytes = Math.max(memoryPeakBytes, readNumber(at("memory.max_usage_in_bytes")));
        }
      }
      if (d.ceilings.includes("pids")) pidLimitHits += counter(readText(at("pids.events")), "max");
    }
    return { oomKills, pidLimitHits, memoryLimitHits, memoryPeakBytes };
  }

  /** Removes every directory this object created (rmdir; fails quietly on a busy one). Returns true when all are gone. */
  remove(): boolean {
    let all = true;
    for (const d of [...this.#created].reverse()) {
      try {
        rmdirSync(d.dir);
        this.#created = this.#created.filter((x) => x !== d);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOENT") this.#created = this.#created.filter((x) => x !== d);
        else all = false;
      }
    }
    return all;
  }
}
