import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** One request the fake model route received. */
export interface ModelRequest {
  readonly authorization: string | undefined;
  readonly body: { model?: string; messages?: { role: string; content: string }[] };
}

/** How the fake answers the next request. */
export type ModelBehaviour = (req: ModelRequest, res: ServerResponse, attempt: number) => void;

/** A local OpenAI-compatible chat-completions server on 127.0.0.1, port 0 (never a live provider). */
export interface FakeModelServer {
  readonly baseUrl: string;
  readonly requests: ModelRequest[];
  /** Sets how the following requests are answered (attempt counts from 1 per behaviour). */
  behave(b: ModelBehaviour): void;
  close(): Promise<void>;
}

/** Answers 200 with one chat completion whose content is `content`. */
export function answer(content: string): ModelBehaviour {
  return (_req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: "chatcmpl-test", object: "chat.completion", model: "fake-model-1", choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }] }));
  };
}

/** Starts the fake model server. */
export async function startFakeModelServer(): Promise<FakeModelServer> {
  const requests: ModelRequest[] = [];
  let behaviour: ModelBehaviour = answer("no diff here");
  let attempt = 0;
  const pending = new Set<ServerResponse>();
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.method !== "POST" || req.url !== "/v1/chat/completions") {
        res.writeHead(404).end();
        return;
      }
      const r: ModelRequest = { authorization: req.headers.authorization, body: JSON.parse(Buffer.concat(chunks).toString("utf8")) };
      requests.push(r);
      pending.add(res);
      res.on("close", () => pending.delete(res));
      attempt += 1;
      behaviour(r, res, attempt);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const port = (server.address() as AddressInfo).port;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    behave(b) {
      behaviour = b;
      attempt = 0;
    },
    async close() {
      for (const r of pending) r.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
