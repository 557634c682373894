// The bearer token lives in this tab's sessionStorage only: never in a URL, a cookie or
// localStorage, and it is gone when the tab closes or the operator signs out.

const KEY = "seraph.api-token";

/** The stored token of this tab, if signed in. */
export function loadToken(): string | null {
  try {
    return window.sessionStorage.getItem(KEY);
  } catch {
    return null;
  }
}

/** Keeps `token` for this tab. */
export function saveToken(token: string): void {
  window.sessionStorage.setItem(KEY, token);
}

/** Forgets the token (sign out). */
export function clearToken(): void {
  try {
    window.sessionStorage.removeItem(KEY);
  } catch {
    // storage unavailable: nothing was stored
  }
}
