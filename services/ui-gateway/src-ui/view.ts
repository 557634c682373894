import type { Principal } from "@seraph/proto/seraph/api/v1/principals_pb.js";
import type { Api } from "./rpc.js";

/** What every screen gets: the API, the signed-in principal, and its own lifetime. */
export interface ViewContext {
  readonly api: Api;
  readonly principal: Principal;
  /** Aborted when the operator leaves the screen: streams and pending reads stop. */
  readonly signal: AbortSignal;
  /** Goes to another screen ("#/work", "#/repair/<id>", "#/settings"). */
  navigate(hash: string): void;
}
