import { storageErrno } from "../supervisor/storage.js";

/**
 * The supervisor could not be started or died before it was ready. `noSpace`: the run directory's
 * storage refused its spec, or the supervisor exited 73 (no room for its owner marker and receipt
 * reserve); either way before any marker, so nothing of the job started.
 */
export class SupervisorLaunchError extends Error {
  override readonly name = "SupervisorLaunchError";
  /** @param message what failed; @param logTail the end of supervisor.log / supervisor.stderr; @param noSpace see above */
  constructor(
    message: string,
    readonly logTail: string = "",
    readonly noSpace = false,
  ) {
    super(logTail.length > 0 ? `${message}\n--- supervisor log ---\n${logTail}` : message);
  }
}

/** Runs a write of the launch into the run directory; a storage refusal is a `noSpace` launch error. */
export function launchWrite<T>(runDir: string, what: string, write: () => T): T {
  try {
    return write();
  } catch (err) {
    const code = storageErrno(err);
    if (code === undefined) throw err;
    throw new SupervisorLaunchError(`no space in ${runDir} for the supervisor's ${what}: ${code}`, "", true);
  }
}

