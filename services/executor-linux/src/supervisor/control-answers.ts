import { create } from "@bufbuild/protobuf";
import {
  ReadOutputResponseSchema,
  StatusResponseSchema,
  Stream,
  type Phase,
  type ReadOutputRequest,
  type ReadOutputResponse,
  type StatusResponse,
} from "@seraph/proto/seraph/supervisor/v1/supervisor_pb.js";
import { commandResult, type CommandState } from "./command-state.js";

/**
 * A command's journal from `offset` (while running and after); a command that has not started
 * reads as an empty stream, closed once the receipt exists (`ended`): then it never will.
 */
export async function readCommandOutput(commands: readonly CommandState[], request: ReadOutputRequest, ended: boolean): Promise<ReadOutputResponse> {
  const command = commands[request.command];
  const journal = request.stream === Stream.STDOUT ? command?.stdout : command?.stderr;
  const base = { stream: request.stream, command: request.command, offset: request.offset };
  if (journal === undefined) {
    return create(ReadOutputResponseSchema, { ...base, keptBytes: 0n, eof: ended });
  }
  const r = await journal.read(Number(request.offset), request.maxBytes);
  return create(ReadOutputResponseSchema, {
    ...base,
    data: r.data,
    keptBytes: BigInt(r.keptBytes),
    eof: r.eof,
    elidedAt: BigInt(r.elidedAt),
    elidedBytes: BigInt(r.elidedBytes),
  });
}

/** The status a controller is answered: phase, current command, its counters, finished results. */
export function statusOf(phase: Phase, commands: readonly CommandState[], currentIndex: number, cancelRequested: boolean): StatusResponse {
  const current = commands[currentIndex];
  return create(StatusResponseSchema, {
    phase,
    currentCommand: currentIndex,
    cancelRequested,
    stdoutBytes: BigInt(current?.stdout?.bytes ?? 0),
    stderrBytes: BigInt(current?.stderr?.bytes ?? 0),
    finished: commands.filter((c) => c.finished).map((c) => commandResult(c)),
  });
}
