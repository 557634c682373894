import type { SupervisorSpec } from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { InvalidSpecError, launchSupervisor, type SupervisorHandle } from "../supervisor-client/index.js";
import { waitExit } from "../supervisor-client/spawn.js";
import { handOverSpec, ownWarmSupervisor, WarmUnavailableError, type WarmSupervisor } from "../supervisor-client/warm.js";
import type { Prestart } from "./run-prestart.js";

// How `seraph-exec run` gets its supervisor: the warm one it started ahead (run-prestart.ts), or a
// fresh launch when that one did not start or took nothing.

/** The prestarted warm supervisor once it is ready, or undefined when it did not start (`run` then launches afresh). */
export async function warmOf(prestart: Prestart): Promise<WarmSupervisor | undefined> {
  const started = await prestart.ready.catch(() => undefined);
  if (started === undefined) return undefined;
  try {
    return ownWarmSupervisor(prestart.runDir, started.pid, started.exited);
  } catch {
    await prestart.discard();
    return undefined;
  }
}

/**
 * Hands `spec` to the warm supervisor. One that took nothing (it refused, is gone, or the spec is
 * invalid) is ended; unless the spec was invalid, `spec` is then launched afresh in the same run
 * directory, so a refusal reads exactly as a fresh launch's. One that may have taken the spec is
 * left to its own controller-loss policy, like a fresh launch that failed late.
 */
export async function handOverOrLaunch(warm: WarmSupervisor, spec: SupervisorSpec): Promise<SupervisorHandle> {
  try {
    return await handOverSpec(warm, spec);
  } catch (err) {
    if (!(err instanceof WarmUnavailableError || err instanceof InvalidSpecError)) throw err;
    warm.signal("SIGKILL");
    await waitExit(warm.exited);
    if (err instanceof InvalidSpecError) throw err;
    return launchSupervisor(spec);
  }
}
