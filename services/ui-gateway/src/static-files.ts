import { createHash } from "node:crypto";
import { existsSync, readFileSync, statSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { extname, join, normalize, sep } from "node:path";
import { brotliCompressSync, constants as zlibConstants, gzipSync } from "node:zlib";

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".json": "application/json",
  ".map": "application/json",
};

/**
 * The Content-Security-Policy of every static file: scripts, styles and RPCs from this origin
 * only, no inline script or style, no plugins, no framing, no <base> rewriting. The UI talks to
 * the API on the same origin (Connect over fetch), so connect-src 'self' is all it needs.
 */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join("; ");

/** Headers sent with every static file. */
export const STATIC_HEADERS: Readonly<Record<string, string>> = {
  "content-security-policy": CONTENT_SECURITY_POLICY,
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "cross-origin-opener-policy": "same-origin",
  "cache-control": "no-cache",
};

/** Content-hashed build outputs (`assets/app-3FQ2LZ7K.js`): their bytes never change under that name. */
const HASHED = /^assets\/[^/]+-[A-Z0-9]{8}\.[a-z0-9.]+$/;
/** Cache-Control of a hashed asset: a year, never revalidated. */
export const IMMUTABLE_CACHE = "public, max-age=31536000, immutable";
const COMPRESSIBLE = new Set([".html", ".js", ".css", ".svg", ".json", ".map"]);

interface Loaded {
  readonly stamp: string;
  readonly body: Buffer;
  readonly etag: string;
  br?: Buffer;
  gzip?: Buffer;
}

/** The encoding to send for an Accept-Encoding header: br, then gzip, else none. */
function pickEncoding(accept: string | undefined): "br" | "gzip" | undefined {
  const tokens = (accept ?? "").split(",").map((t) => t.trim().split(";"));
  const ok = (name: string) => tokens.some(([n, q]) => n === name && !/^\s*q=0(\.0*)?\s*$/.test(q ?? ""));
  if (ok("br")) return "br";
  if (ok("gzip")) return "gzip";
  return undefined;
}

/**
 * Serves GET and HEAD requests for files under `root` (never outside it); returns false for
 * anything else. Every file carries a strong ETag (SHA-256 of its bytes) and answers a matching
 * If-None-Match with 304; text files are sent brotli- or gzip-compressed when the client accepts
 * it (compressed once per file version, kept in memory); content-hashed names under assets/ are
 * cacheable for a year, everything else (index.html) is revalidated on every use.
 */
export function createStaticHandler(root: string): (req: IncomingMessage, res: ServerResponse) => boolean {
  const cache = new Map<string, Loaded>();
  const load = (file: string, stamp: string): Loaded => {
    const hit = cache.get(file);
    if (hit && hit.stamp === stamp) return hit;
    const body = readFileSync(file);
    const loaded: Loaded = { stamp, body, etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 32)}"` };
    cache.set(file, loaded);
    return loaded;
  };
  return (req, res) => {
    if (req.method !== "GET" && req.method !== "HEAD") return false;
    const url = new URL(req.url ?? "/", "http://localhost");
    let rel: string;
    try {
      rel = url.pathname === "/" ? "index.html" : decodeURIComponent(url.pathname).replace(/^\/+/, "");
    } catch {
      return false; // malformed percent-encoding: not a file of ours
    }
    const file = normalize(join(root, rel));
    if (!file.startsWith(root + sep) || !existsSync(file)) return false;
    const st = statSync(file);
    if (!st.isFile()) return false;
    const f = load(file, `${st.size}:${st.mtimeMs}:${st.ino}`);
    const ext = extname(file);
    const headers: Record<string, string> = {
      ...STATIC_HEADERS,
      "content-type": TYPES[ext] ?? "application/octet-stream",
      etag: f.etag,
      ...(HASHED.test(rel.split(sep).join("/")) ? { "cache-control": IMMUTABLE_CACHE } : {}),
    };
    const compressible = COMPRESSIBLE.has(ext);
    if (compressible) headers["vary"] = "accept-encoding";
    const inm = req.headers["if-none-match"];
    if (inm !== undefined && inm.split(",").some((t) => t.trim() === f.etag || t.trim() === "*")) {
      res.writeHead(304, headers);
      res.end();
      return true;
    }
    let body = f.body;
    const enc = compressible && f.body.length > 256 ? pickEncoding(req.headers["accept-encoding"]) : undefined;
    if (enc === "br") body = f.br ??= brotliCompressSync(f.body, { params: { [zlibConstants.BROTLI_PARAM_QUALITY]: 9 } });
    else if (enc === "gzip") body = f.gzip ??= gzipSync(f.body, { level: 9 });
    if (enc) headers["content-encoding"] = enc;
    headers["content-length"] = String(body.length);
    res.writeHead(200, headers);
    if (req.method === "HEAD") res.end();
    else res.end(body);
    return true;
  };
}
