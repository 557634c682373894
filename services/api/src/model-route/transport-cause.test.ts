import { createServer, type Server } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import { transportCause } from "./transport-cause.js";

// Real sockets on loopback: each transport failure fetch reports as "fetch failed" is named.
const servers: Server[] = [];
afterAll(() => servers.forEach((s) => s.close()));

async function listen(onSocket: Parameters<typeof createServer>[1]): Promise<number> {
  const s = createServer(onSocket);
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", () => r()));
  return (s.address() as { port: number }).port;
}

async function causeOf(url: string): Promise<string> {
  try {
    await fetch(url, { method: "POST", body: "{}", signal: AbortSignal.timeout(5000) });
  } catch (err) {
    expect((err as Error).message).toBe("fetch failed");
    return transportCause(err);
  }
  throw new Error(`${url} answered`);
}

describe("transportCause: what fetch's 'fetch failed' was", () => {
  it("connection refused", async () => {
    const port = await listen(() => undefined);
    servers.pop()!.close();
    await new Promise((r) => setTimeout(r, 50));
    expect(await causeOf(`http://127.0.0.1:${port}/v1`)).toMatch(/^connection refused.*ECONNREFUSED/);
  });

  it("a peer that is not HTTP, one that closes the connection, and TLS to a plain HTTP port", async () => {
    const ssh = await listen((s) => s.end("SSH-2.0-OpenSSH_9.6\r\n"));
    expect(await causeOf(`http://127.0.0.1:${ssh}/v1`)).toMatch(/^the other side does not speak HTTP\/1.1 \((HPE_|HTTPParserError)/);
    const closing = await listen((s) => s.destroy());
    expect(await causeOf(`http://127.0.0.1:${closing}/v1`)).toMatch(/^the connection was closed by the other side/);
    const plain = await listen((s) => {
      s.on("error", () => undefined);
      s.once("data", () => s.end("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"));
    });
    expect(await causeOf(`https://127.0.0.1:${plain}/v1`)).toMatch(/^TLS: ERR_SSL_/);
  });

  it("DNS", async () => {
    expect(await causeOf("http://seraph-no-such-host.invalid/v1")).toMatch(/^DNS: the host name does not resolve \((ENOTFOUND|EAI_AGAIN)/);
  });
});
