/** File names inside a supervisor's private 0700 run directory. */
export const RunDirFiles = Object.freeze({
  /** SupervisorSpec bytes written by the controller (0600) before launch. */
  spec: "spec.binpb",
  /** Capability token (64 hex chars, 0600) written by the supervisor at startup. */
  token: "token",
  /** Control socket. Kept short: a Unix socket path is limited to 107 bytes. */
  socket: "ctl.sock",
  /** OwnerMarker, written atomically before the start barrier. */
  marker: "marker.binpb",
  /** The same marker as JSON, for humans. */
  markerJson: "marker.json",
  /** Receipt, written atomically before the supervisor exits. */
  receipt: "receipt.binpb",
  /** The same receipt as JSON (receiptToJson), for humans. */
  receiptJson: "receipt.json",
  /** The receipt's space, reserved before GO (receipt-reserve.ts); renamed to receipt.binpb at the receipt. */
  receiptReserve: ".receipt.binpb.reserve",
  /** The same for receipt.json. */
  receiptJsonReserve: ".receipt.json.reserve",
  /** JSON lines (log.ts). */
  log: "supervisor.log",
  /** A warm supervisor's one-request socket (spec or retire), before and after it took a job. */
  warmSocket: "warm.sock",
  /** The warm socket's capability token (64 hex chars, 0600), written before the socket exists. */
  warmToken: "warm.token",
  /** WarmMarker: the warm supervisor's identity, written atomically once warm.sock listens. */
  warmMarker: "warm.binpb",
});

/** Journal file of one command's stream: `cmd-<index>.<stdout|stderr>`. */
export function journalFileName(command: number, stream: "stdout" | "stderr"): string {
  return `cmd-${command}.${stream}`;
}

/** Longest socket path the kernel accepts in sockaddr_un (108 bytes including the NUL). */
export const MAX_SOCKET_PATH_BYTES = 107;
