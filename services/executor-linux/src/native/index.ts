/**
 * The native layer: koffi over libc and raw syscalls (libc.ts is the only importer of koffi
 * in this service), /proc access, and the in-process facility probe.
 */
export {
  Errno,
  Signal,
  NativeCallError,
  decodeWaitStatus,
  type CallResult,
  type ExitStatus,
  type FdResult,
  type NativeSystem,
  type NetworkNamespaceCalls,
  type PeerCredentials,
  type ReadableWatch,
  type SpawnRequest,
  type SpawnResult,
  type WaitResult,
} from "./native-system.js";
export { createNativeSystem, createNetworkNamespaceCalls } from "./libc.js";
export { JobNetworkNamespace, NetworkNamespaceError, interfacesOf, networkNamespaceProblem } from "./network-namespace.js";
export { createProcFs, KERNEL_BOOT_ID_FILE, readBootIdFile, isDeadState, isExited, parseProcStat, signalDisposition, type ProcFs, type ProcFsOptions, type ProcStat } from "./proc-fs.js";
export { facilityBlocker, probeFacilitiesInThisProcess, type FacilityProbe, type FacilityProbeDeps } from "./facility.js";
export {
  INITIAL_PID_NAMESPACE,
  findInPidNamespace,
  isPidNamespaceLink,
  readNsPids,
  readPidNamespace,
  scanPidNamespace,
  type PidNamespaceScan,
} from "./pid-namespace.js";
