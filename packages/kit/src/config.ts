/** A configuration problem found at start-up; lists every bad variable at once. */
export class ConfigError extends Error {
  readonly problems: readonly string[];
  constructor(problems: readonly string[]) {
    super(`invalid configuration:\n  ${problems.join("\n  ")}`);
    this.name = "ConfigError";
    this.problems = problems;
  }
}

/** One variable's reader: returns the value or pushes a problem. */
export type EnvReader<T> = (env: Readonly<Record<string, string | undefined>>, name: string, problems: string[]) => T;

/** A string; `fallback` when unset (undefined fallback = required). */
export function str(fallback?: string): EnvReader<string> {
  return (env, name, problems) => {
    const v = env[name];
    if (v !== undefined && v !== "") return v;
    if (fallback !== undefined) return fallback;
    problems.push(`${name} is required`);
    return "";
  };
}

/** An optional string (undefined when unset). */
export function optionalStr(): EnvReader<string | undefined> {
  return (env, name) => {
    const v = env[name];
    return v === undefined || v === "" ? undefined : v;
  };
}

/** An integer within [min, max]. */
export function int(fallback: number | undefined, min = 0, max = Number.MAX_SAFE_INTEGER): EnvReader<number> {
  return (env, name, problems) => {
    const raw = env[name];
    if (raw === undefined || raw === "") {
      if (fallback !== undefined) return fallback;
      problems.push(`${name} is required`);
      return 0;
    }
    if (!/^-?\d+$/.test(raw)) {
      problems.push(`${name} must be an integer, got ${JSON.stringify(raw)}`);
      return 0;
    }
    const n = Number(raw);
    if (n < min || n > max) problems.push(`${name} must be between ${min} and ${max}, got ${n}`);
    return n;
  };
}

/** "true"/"false"/"1"/"0". */
export function bool(fallback: boolean): EnvReader<boolean> {
  return (env, name, problems) => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    if (raw === "true" || raw === "1") return true;
    if (raw === "false" || raw === "0") return false;
    problems.push(`${name} must be true or false, got ${JSON.stringify(raw)}`);
    return fallback;
  };
}

/** One of a fixed set. */
export function oneOf<T extends string>(values: readonly T[], fallback: T): EnvReader<T> {
  return (env, name, problems) => {
    const raw = env[name];
    if (raw === undefined || raw === "") return fallback;
    if ((values as readonly string[]).includes(raw)) return raw as T;
    problems.push(`${name} must be one of ${values.join(", ")}, got ${JSON.stringify(raw)}`);
    return fallback;
  };
}

/** Reads every variable of `spec` from `env`; throws one ConfigError naming every problem; returns a frozen object. */
export function readConfig<S extends Record<string, EnvReader<unknown>>>(
  env: Readonly<Record<string, string | undefined>>,
  spec: S,
): Readonly<{ [K in keyof S]: ReturnType<S[K]> }> {
  const problems: string[] = [];
  const out: Record<string, unknown> = {};
  for (const [name, reader] of Object.entries(spec)) out[name] = reader(env, name, problems);
  if (problems.length > 0) throw new ConfigError(problems);
  return Object.freeze(out) as { [K in keyof S]: ReturnType<S[K]> };
}
