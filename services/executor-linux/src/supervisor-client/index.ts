/**
 * Controller side of the per-job supervisor: launch it, connect (and re-adopt after a
 * restart), check its identity, run a spec to its receipt, read the facility report, and
 * print receipts. A controller using this module never becomes a subreaper and never calls
 * waitpid(-1); the only child it has is the supervisor itself, which libuv waits on by pid.
 */
export {
  connectSupervisor,
  SupervisorConnectionClosedError,
  SupervisorProtocolError,
  SupervisorUnresponsiveError,
  type ConnectOptions,
  type SupervisorConnection,
} from "./connection.js";
export { readFacilityReport, type FacilityReportOptions } from "./facility.js";
export { supervisorPidHere, verifySupervisorIdentity, type SupervisorIdentityVerdict } from "./identity.js";
export {
  launchSupervisor,
  prepareCompileCacheDir,
  prepareRunDir,
  requestHostLaunch,
  spawnSupervisorProcess,
  supervisorRuntimeOf,
  SupervisorLaunchError,
  type SupervisorHostAddress,
  waitSupervisorGone,
  type LaunchOptions,
  type SupervisorHandle,
} from "./launch.js";
export { defaultSupervisorEntry, defaultSupervisorRuntime, supervisorCompileCacheDir } from "./paths.js";
export {
  CONTROLLER_DEADLINE_MARGIN_MS,
  ControllerUnknownError,
  runToReceipt,
  type ControllerUnknownReason,
  type OutputChunk,
  type RunToReceiptOptions,
} from "./run-to-receipt.js";
export { JournalMismatchError, readVerifiedJournal, type VerifiedJournal } from "./journals.js";
export {
  outcomeName,
  phaseName,
  receiptToJson,
  type CommandResultJson,
  type OutcomeName,
  type ReceiptJson,
  type StreamStatsJson,
} from "../supervisor/receipt-json.js";
export {
  InvalidSpecError,
  MAX_ARGV_ENTRIES,
  CONTROLLER_LOSS_GRACE_DEFAULT_MS,
  MIN_KILL_MARGIN_MS,
  OUTPUT_LIMIT_MAX_BYTES,
  STREAM_LIMIT_MAX_BYTES,
  specProblems,
} from "../supervisor/spec.js";
export { RunDirFiles } from "../supervisor/run-dir.js";
