import { constants as osConstants } from "node:os";
import { create } from "@bufbuild/protobuf";
import { CommandResultSchema, StreamStatsSchema, type CommandResult, type CommandSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import type { ExitStatus } from "../native/native-system.js";
import type { Containment } from "./containment.js";
import type { StreamJournal } from "./journal.js";
import type { Reaper } from "./reaper.js";

/** One command of the job's fixed sequence, as the supervisor runs it. */
export interface CommandState {
  readonly index: number;
  readonly spec: CommandSpec;
  stdout: StreamJournal | undefined;
  stderr: StreamJournal | undefined;
  pid: number | undefined;
  startedUnixMs: number;
  endedUnixMs: number;
  exit: ExitStatus | undefined;
  spawnErrno: number | undefined;
  leftovers: number;
  finished: boolean;
  /** Pipe write ends made by prepare() and not yet handed to a spawn. */
  writeFds: readonly [number, number] | undefined;
  /** OOM kills and pid-limit hits in the job's cgroup while this command ran. */
  oomKills: number;
  pidLimitHits: number;
}

/** The state of command `index` before anything of it exists. */
export function newCommandState(spec: CommandSpec, index: number): CommandState {
  return {
    index,
    spec,
    stdout: undefined,
    stderr: undefined,
    pid: undefined,
    startedUnixMs: 0,
    endedUnixMs: 0,
    exit: undefined,
    spawnErrno: undefined,
    leftovers: 0,
    finished: false,
    writeFds: undefined,
    oomKills: 0,
    pidLimitHits: 0,
  };
}

const SIGNAL_NAMES: ReadonlyMap<number, string> = new Map(
  Object.entries(osConstants.signals).map(([name, num]) => [num, name] as const),
);

/** The receipt's result of one command: how it ended, its streams' stats and counters. */
export function commandResult(c: CommandState): CommandResult {
  const empty = create(StreamStatsSchema, {});
  const exit = c.exit;
  return create(CommandResultSchema, {
    name: c.spec.name,
    argv: c.spec.argv,
    started: c.pid !== undefined,
    exitCode: exit?.kind === "exited" ? exit.code : undefined,
    signal: exit?.kind === "signaled" ? (SIGNAL_NAMES.get(exit.signal) ?? `SIG${exit.signal}`) : undefined,
    startedUnixMs: BigInt(c.startedUnixMs),
    endedUnixMs: BigInt(c.endedUnixMs),
    stdout: c.stdout?.stats() ?? empty,
    stderr: c.stderr?.stats() ?? empty,
    leftoverDescendants: c.leftovers,
    oomKills: c.oomKills,
    pidLimitHits: c.pidLimitHits,
  });
}

/**
 * After cleanup: a direct command that cleanup stopped was reaped there, so how it ended is
 * recorded now; with a job cgroup its counters are what the job counted beside the others'.
 */
export function recordCleanupExits(commands: readonly CommandState[], reaper: Reaper, containment: Containment | undefined): void {
  for (const c of commands) {
    if (c.pid === undefined || c.finished) continue;
    const exit = reaper.exitOf(c.pid);
    if (exit === undefined) continue;
    c.exit = exit.status;
    c.endedUnixMs = exit.reapedUnixMs;
    c.finished = true;
    if (containment !== undefined) {
      // Counted since the job began: only this command was running.
      const total = containment.counters();
      const earlier = commands.filter((o) => o !== c);
      c.oomKills = total.oomKills - earlier.reduce((n, o) => n + o.oomKills, 0);
      c.pidLimitHits = total.pidLimitHits - earlier.reduce((n, o) => n + o.pidLimitHits, 0);
    }
  }
}
