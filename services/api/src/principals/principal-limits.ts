import { ResourceExhaustedError } from "@seraph/kit";
import { COUNT_LIMIT_SETTINGS, type ApiCountLimits } from "../limits.js";
import type { RootCounts } from "./principal.repository.js";

/** One count bound: refused with RESOURCE_EXHAUSTED `reason` naming its setting (ErrorInfo metadata `limit`). */
function bound(reason: string, key: keyof ApiCountLimits, limits: ApiCountLimits, have: number, what: string): void {
  const max = limits[key];
  if (have < max) return;
  const setting = COUNT_LIMIT_SETTINGS[key];
  throw new ResourceExhaustedError(reason, `At most ${max} ${what} (${setting}=${max}); ${have} exist. Revoke or remove one first.`, undefined, { limit: setting });
}

/** Refuses one more token for a principal that has `counts.principalTokens` in a root that has `counts.rootTokens`. */
export function checkTokenRoom(limits: ApiCountLimits, counts: RootCounts): void {
  bound("token_limit", "tokensPerPrincipal", limits, counts.principalTokens, "unrevoked tokens per principal");
  bound("token_limit", "tokensPerRoot", limits, counts.rootTokens, "unrevoked tokens per operator root, all its principals together");
}

/** Refuses one more principal (with its first token) in a root with `counts`. */
export function checkPrincipalRoom(limits: ApiCountLimits, counts: RootCounts): void {
  bound("principal_limit", "principalsPerRoot", limits, counts.principals, "principals per operator root");
  bound("token_limit", "tokensPerRoot", limits, counts.rootTokens, "unrevoked tokens per operator root, all its principals together");
}
