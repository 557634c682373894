import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";

/** A local OpenAI-compatible chat-completions server on a free loopback port. */
export interface ModelServer {
  /** The base URL to configure as a model route (…/v1). */
  readonly baseUrl: string;
  /** Every request body it received, parsed. */
  readonly requests: { model: string; messages: { role: string; content: string }[] }[];
  close(): Promise<void>;
}

async function body(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/** Answers every chat completion with `answer` (the model's text) as model `served`. */
export async function startModelServer(answer: string, served = "served-model"): Promise<ModelServer> {
  const requests: ModelServer["requests"] = [];
  const server = createServer((req, res) => {
    void body(req).then((text) => {
      requests.push(JSON.parse(text) as ModelServer["requests"][number]);
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ model: served, choices: [{ message: { role: "assistant", content: answer } }] }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
