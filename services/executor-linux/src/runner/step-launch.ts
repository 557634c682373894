import { mkdir, readFile, rename, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { OwnerMarkerSchema, type OwnerMarker, type Receipt, type SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { connectSupervisor, launchSupervisor, RunDirFiles, supervisorCompileCacheDir, waitSupervisorGone, type SupervisorHandle } from "../supervisor-client/index.js";
import { handOverSpec, moveWarmSupervisor, retireWarmSupervisor, WarmUnavailableError, type WarmSupervisor } from "../supervisor-client/warm.js";
import type { Ctx } from "./attempt.js";
import { DetachedError } from "./retry.js";
import { driveStep, verdictFor } from "./steps.js";

/** A supervisor launch: its handle, or why it failed. */
export type Launched = { readonly handle: SupervisorHandle } | { readonly error: unknown };

/** The first step's supervisor, launched during preparation for `spec` (undefined: never launched). */
export interface EarlyLaunch {
  readonly spec: SupervisorSpec;
  readonly launched: Promise<Launched | undefined>;
}

/** Launches one step's supervisor (behind its start barrier); never rejects. */
export async function launchStep(ctx: Ctx, spec: SupervisorSpec): Promise<Launched> {
  const { deps } = ctx;
  try {
    // A warm supervisor when one waits (after it took the spec it is exactly a fresh launch of
    // it); anything that keeps it from taking the spec falls back to a cold launch.
    const warm = await deps.warm?.takeOrWait();
    const handed = warm !== undefined ? await handOverWarm(ctx, warm, spec) : undefined;
    if (handed !== undefined) {
      ctx.log.debug({ pid: handed.pid }, "a warm supervisor took the step's spec");
      return { handle: handed };
    }
    return {
      handle: await launchSupervisor(spec, {
        ...(deps.supervisorEntry ? { supervisorEntry: deps.supervisorEntry } : {}),
        host: deps.supervisorHost,
        proc: deps.proc,
        nodePath: deps.supervisorRuntime,
        compileCacheDir: supervisorCompileCacheDir(deps.dataDir),
      }),
    };
  } catch (error) {
    return { error };
  }
}

/**
 * A supervisor launched during preparation whose job will not start: it is cancelled before GO
 * (its marker never recorded) and must prove its cleanup. Resolves to its receipt, undefined
 * when none was launched, or "unproved" when it gave no receipt that observed ECHILD.
 */
export async function stopEarlyLaunch(ctx: Ctx, early: EarlyLaunch, why: string): Promise<Receipt | undefined | "unproved"> {
  const launched = await early.launched;
  if (launched === undefined || "error" in launched) return undefined;
  try {
    const conn = await launched.handle.connect(ctx.deps.identity.incarnationId);
    const run = await driveStep(ctx, conn, launched.handle.marker, early.spec.runDir, true, why);
    return run.receipt?.echildObserved ? run.receipt : "unproved";
  } catch (err) {
    if (err instanceof DetachedError) throw err;
    ctx.log.error({ err }, "the supervisor prepared for the job could not be stopped");
    return "unproved";
  }
}

/**
 * Gives a step's spec to a warm supervisor: its directory is renamed to the step's run directory
 * (where a fresh launch would have made it), then the spec goes over warm.sock. When the warm
 * supervisor was not reached or refused (it took nothing), its directory is moved aside, it is
 * retired, and undefined tells the caller to launch cold.
 */
export async function handOverWarm(ctx: Pick<Ctx, "log" | "deps">, warm: WarmSupervisor, spec: SupervisorSpec): Promise<SupervisorHandle | undefined> {
  let moved: WarmSupervisor;
  try {
    await mkdir(dirname(spec.runDir), { recursive: true, mode: 0o700 });
    moved = await moveWarmSupervisor(warm, spec.runDir);
  } catch (err) {
    ctx.log.warn({ err }, "warm supervisor not used; launching cold");
    void retireWarmSupervisor(warm.runDir);
    return undefined;
  }
  try {
    return await handOverSpec(moved, spec, { proc: ctx.deps.proc });
  } catch (err) {
    if (!(err instanceof WarmUnavailableError)) throw err;
    ctx.log.warn({ err }, "warm supervisor did not take the spec; launching cold");
    const aside = `${spec.runDir}.stale-warm-${Date.now()}`;
    await rename(spec.runDir, aside);
    void retireWarmSupervisor(aside);
    return undefined;
  }
}

/**
 * Before a re-adopted attempt launches a step, a run directory left by a supervisor that was
 * started before the restart but never recorded (so never given GO) is cancelled and moved
 * aside; nothing in it ever ran.
 */
export async function setAsideStrayRunDir(ctx: Ctx, runDir: string): Promise<void> {
  if (!(await stat(runDir).catch(() => undefined))) return;
  const markerBytes = await readFile(join(runDir, RunDirFiles.marker)).catch(() => undefined);
  if (markerBytes) await cancelBeforeGo(ctx, runDir, fromBinary(OwnerMarkerSchema, markerBytes), "the executor restarted before this supervisor's start token");
  await rename(runDir, `${runDir}.stale-${Date.now()}`);
}

/**
 * Cancels a supervisor of `runDir` that never got its start token, when it is still alive, and
 * waits (bounded) until it is gone. Resolves to what it answered for its receipt, or undefined
 * when it was not alive or did not answer (a failure is logged).
 */
export async function cancelBeforeGo(ctx: Ctx, runDir: string, marker: OwnerMarker, why: string): Promise<{ readonly receipt: Receipt | undefined } | undefined> {
  if ((await verdictFor(ctx, marker)) !== "alive") return undefined;
  let served: { readonly receipt: Receipt | undefined } | undefined;
  try {
    const conn = await connectSupervisor(runDir, ctx.deps.identity.incarnationId);
    await conn.cancel(why);
    served = { receipt: await conn.receipt(true) };
    await conn.close();
    await waitSupervisorGone(marker, 3000, ctx.deps.proc);
  } catch (err) {
    ctx.log.warn({ err, runDir }, "could not cancel a supervisor that never got its start token");
  }
  return served;
}
