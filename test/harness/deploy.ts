import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

// What the deploy tests share: both overlays rendered by `kubectl kustomize` (dev with fresh
// secrets from its own make-secrets.sh), a container's environment as the kubelet would build
// it, and the Dockerfile read as instructions.

/** A rendered Kubernetes object. */
export type Obj = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string> }; [k: string]: any };

/** The repository root. */
export const REPO = fileURLToPath(new URL("../..", import.meta.url));

function kustomize(dir: string): Obj[] {
  let out: string;
  try {
    out = execFileSync("kubectl", ["kustomize", dir], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 60_000 });
  } catch (err) {
    throw new Error(`kubectl kustomize ${dir} failed (kubectl is required: Debian package kubernetes-client; .ci/run installs it): ${String((err as { stderr?: string }).stderr ?? err)}`);
  }
  const objs = parseAllDocuments(out)
    .map((d) => d.toJS() as Obj)
    .filter((o) => o !== null);
  // kustomize wraps long base64 values of generated Secrets over lines; the API server's
  // base64 decoder skips line breaks, the schema's "byte" format does not.
  for (const o of objs) if (o.kind === "Secret") for (const k of Object.keys(o["data"] ?? {})) o["data"][k] = String(o["data"][k]).replace(/\s+/g, "");
  return objs;
}

/** Both overlays, rendered from a copy of deploy/ (dev's secrets made by its make-secrets.sh). */
export function renderOverlays(): { dev: Obj[]; production: Obj[]; work: string; close(): void } {
  const work = mkdtempSync(join(tmpdir(), "seraph-deploy-"));
  cpSync(join(REPO, "deploy"), join(work, "deploy"), { recursive: true, filter: (s) => !s.includes("/secrets") });
  execFileSync("sh", [join(work, "deploy/overlays/dev/make-secrets.sh")], { stdio: "pipe" });
  return {
    dev: kustomize(join(work, "deploy/overlays/dev")),
    production: kustomize(join(work, "deploy/overlays/production")),
    work,
    close: () => rmSync(work, { recursive: true, force: true }),
  };
}

/** Workloads (Deployment, DaemonSet, StatefulSet) of a rendering. */
export const workloads = (objs: Obj[]): Obj[] => objs.filter((o) => ["Deployment", "DaemonSet", "StatefulSet"].includes(o.kind));
/** A workload's pod spec. */
export const podSpec = (w: Obj) => w["spec"].template.spec;
/** Kustomize appends a content hash to generated names; the base name without it. */
export const baseName = (name: string): string => name.replace(/-[a-z0-9]{10}$/, "");
/** The object of `kind` whose (generated) name is `name`. */
export const byBaseName = (objs: Obj[], kind: string, name: string): Obj | undefined => objs.find((o) => o.kind === kind && baseName(o.metadata.name) === name);

/** What the kubelet takes from the pod itself (downward API), for containerEnv. */
export interface PodFacts {
  readonly podIP: string;
  readonly nodeName: string;
}

/**
 * A container's environment as the kubelet builds it: envFrom ConfigMaps and Secrets first,
 * then env in order (values with `$(VAR)` expanded from variables defined before them, Secret
 * and ConfigMap keys from the rendering, downward-API fields from `pod`). Throws on a reference
 * that does not resolve.
 */
export function containerEnv(objs: Obj[], container: any, pod: PodFacts): Record<string, string> {
  const env: Record<string, string> = {};
  const data = (kind: "Secret" | "ConfigMap", name: string): Record<string, string> => {
    const o = objs.find((x) => x.kind === kind && x.metadata.name === name);
    if (!o) throw new Error(`${container.name}: ${kind} ${name} is not in the rendering`);
    const d = (o["data"] ?? {}) as Record<string, string>;
    return kind === "Secret" ? Object.fromEntries(Object.entries(d).map(([k, v]) => [k, Buffer.from(v, "base64").toString("utf8")])) : d;
  };
  for (const from of container.envFrom ?? []) {
    if (from.configMapRef) Object.assign(env, data("ConfigMap", from.configMapRef.name));
    if (from.secretRef) Object.assign(env, data("Secret", from.secretRef.name));
  }
  for (const e of container.env ?? []) {
    if (e.value !== undefined) {
      env[e.name] = String(e.value).replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (_m, v: string) => {
        if (!(v in env)) throw new Error(`${container.name}: ${e.name} refers to $(${v}), which is not defined before it`);
        return env[v]!;
      });
    } else if (e.valueFrom?.fieldRef) {
      const path = e.valueFrom.fieldRef.fieldPath as string;
      if (path === "status.podIP") env[e.name] = pod.podIP;
      else if (path === "spec.nodeName") env[e.name] = pod.nodeName;
      else throw new Error(`${container.name}: ${e.name} reads field ${path}, which this helper does not know`);
    } else if (e.valueFrom?.secretKeyRef || e.valueFrom?.configMapKeyRef) {
      const ref = e.valueFrom.secretKeyRef ?? e.valueFrom.configMapKeyRef;
      const d = data(e.valueFrom.secretKeyRef ? "Secret" : "ConfigMap", ref.name);
      if (!(ref.key in d)) throw new Error(`${container.name}: ${e.name} reads key ${ref.key} of ${ref.name}, which it does not have`);
      env[e.name] = d[ref.key]!;
    } else {
      throw new Error(`${container.name}: ${e.name} has neither a value nor a known valueFrom`);
    }
  }
  return env;
}

/** One Dockerfile instruction, continuation lines joined. */
export interface DockerInstruction {
  readonly op: string;
  readonly args: string;
}

/** The Dockerfile's stages, each its instructions in order (comments and parser directives dropped). */
export function dockerfileStages(text: string): { name: string; instructions: DockerInstruction[] }[] {
  const logical: string[] = [];
  let cur = "";
  for (const raw of text.split("\n")) {
    if (cur === "" && /^\s*#/.test(raw)) continue;
    if (raw.endsWith("\\")) {
      cur += raw.slice(0, -1) + " ";
      continue;
    }
    cur += raw;
    if (cur.trim() !== "") logical.push(cur.trim().replace(/\s+/g, " "));
    cur = "";
  }
  const stages: { name: string; instructions: DockerInstruction[] }[] = [{ name: "(global)", instructions: [] }];
  for (const line of logical) {
    const sp = line.indexOf(" ");
    const op = line.slice(0, sp).toUpperCase();
    const args = line.slice(sp + 1);
    if (op === "FROM") stages.push({ name: / AS (\S+)$/i.exec(args)?.[1] ?? `stage${stages.length}`, instructions: [] });
    stages[stages.length - 1]!.instructions.push({ op, args });
  }
  return stages;
}

/** The image's run-time configuration: the final stage's WORKDIR, ENV, USER and CMD. */
export function imageConfig(text = readFileSync(join(REPO, "Dockerfile"), "utf8")): { workdir: string; env: Record<string, string>; user: { uid: number; gid: number }; cmd: string[] } {
  const final = dockerfileStages(text).at(-1)!;
  let workdir = "/";
  const env: Record<string, string> = {};
  let user = { uid: 0, gid: 0 };
  let cmd: string[] = [];
  for (const i of final.instructions) {
    if (i.op === "WORKDIR") workdir = i.args;
    if (i.op === "ENV") for (const m of i.args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=(\S+)/g)) env[m[1]!] = m[2]!;
    if (i.op === "USER") {
      const m = /^(\d+):(\d+)$/.exec(i.args);
      if (!m) throw new Error(`USER ${i.args}: the image must name a numeric uid:gid (runAsNonRoot needs a number)`);
      user = { uid: Number(m[1]), gid: Number(m[2]) };
    }
    if (i.op === "CMD") cmd = JSON.parse(i.args) as string[];
  }
  return { workdir, env, user, cmd };
}
