import { createServer } from "node:net";

/** A TCP port that was free a moment ago on 127.0.0.1 (bind 0, read, close). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const addr = s.address();
      if (addr === null || typeof addr === "string") return reject(new Error("no port"));
      s.close(() => resolve(addr.port));
    });
  });
}

async function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

/**
 * A port base whose eight embedded ports (+0 +1 +10 +11 +20 +21 +30 +80) are all free now, below
 * Linux's ephemeral range (32768 up), where other tests' port-0 binds and client sockets land.
 */
export async function freeEmbeddedPortBase(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const base = 20000 + Math.floor(Math.random() * 120) * 100;
    const all = await Promise.all([0, 1, 9, 10, 11, 20, 21, 30, 80].map((o) => portFree(base + o)));
    if (all.every(Boolean)) return base;
  }
  throw new Error("no free port base");
}
