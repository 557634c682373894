/** An error and its `cause`s, outermost first (at most 8). */
export function causeChain(err: unknown): Error[] {
  const out: Error[] = [];
  for (let e: unknown = err; e instanceof Error && out.length < 8; e = e.cause) out.push(e);
  return out;
}

/**
 * Why a request to a model route never got an HTTP answer, in words an operator can act on:
 * fetch (undici) reports every transport failure as `TypeError: fetch failed`, with the real
 * error in its `cause` chain (a system call's errno code, an undici or OpenSSL code).
 */
export function transportCause(err: unknown): string {
  const chain = causeChain(err).map((e) => ({ code: String((e as { code?: unknown }).code ?? ""), name: e.name, message: e.message }));
  // The innermost error that says something: a code, or undici's parser error (whose code some Node versions leave unset).
  const root = [...chain].reverse().find((c) => c.code !== "" || c.name === "HTTPParserError") ?? chain.at(-1) ?? { code: "", name: "", message: String(err) };
  const { code, message } = root;
  if (root.name === "HTTPParserError") return `the other side does not speak HTTP/1.1 (${code || "HTTPParserError"}: ${message})`;
  const is = (...codes: string[]) => codes.includes(code);
  if (is("ECONNREFUSED")) return `connection refused: nothing listens at that address (${code})`;
  if (is("ENOTFOUND", "EAI_AGAIN", "EAI_NONAME", "EAI_FAIL")) return `DNS: the host name does not resolve (${code}: ${message})`;
  if (is("ETIMEDOUT", "UND_ERR_CONNECT_TIMEOUT")) return `connect timeout: the host did not accept the connection in time (${code})`;
  if (is("EHOSTUNREACH", "ENETUNREACH", "EADDRNOTAVAIL")) return `no route to the host (${code})`;
  if (is("ECONNRESET", "EPIPE", "UND_ERR_SOCKET", "UND_ERR_CLOSED")) return `the connection was closed by the other side before an HTTP answer (${code}: ${message})`;
  if (code.startsWith("ERR_SSL_") || code.startsWith("ERR_TLS_") || code.startsWith("CERT_") || /^(UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_)/.test(code)) {
    return `TLS: ${code} (${message.split(":").slice(0, 6).join(":").slice(0, 200)})`;
  }
  if (message === "bad port") return "the port is one fetch refuses to use (a well-known non-HTTP port)";
  return code === "" ? message : `${code}: ${message}`;
}
