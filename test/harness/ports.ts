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
