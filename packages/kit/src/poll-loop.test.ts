import { describe, expect, it } from "vitest";
import { startPollLoop } from "./poll-loop.js";

describe("startPollLoop", () => {
  it("polls on its interval, runs at once when woken, survives failing passes, and stops", async () => {
    const passes: number[] = [];
    const errors: number[] = [];
    let n = 0;
    const loop = startPollLoop({
      pollMs: 60_000,
      pass: async () => {
        n += 1;
        passes.push(n);
        if (n === 2) throw new Error("database down");
      },
      onError: (_err, failures) => errors.push(failures),
    });
    await new Promise((r) => setTimeout(r, 20));
    expect(passes).toEqual([1]); // the first pass runs at once, then it sleeps (60 s poll)
    loop.wake();
    await new Promise((r) => setTimeout(r, 20));
    expect(passes).toEqual([1, 2]);
    expect(errors).toEqual([1]);
    loop.wake();
    await new Promise((r) => setTimeout(r, 20));
    expect(passes).toEqual([1, 2, 3]);
    await loop.stop();
    expect(loop.stopped).toBe(true);
    loop.wake();
    await new Promise((r) => setTimeout(r, 20));
    expect(passes).toEqual([1, 2, 3]);
  });

  it("a wake during a pass causes one more pass without sleeping", async () => {
    let calls = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const loop = startPollLoop({
      pollMs: 60_000,
      pass: async () => {
        calls += 1;
        if (calls === 1) await gate;
      },
      onError: () => undefined,
    });
    await new Promise((r) => setTimeout(r, 10));
    expect(calls).toBe(1); // the first pass is in flight
    loop.wake();
    release();
    await new Promise((r) => setTimeout(r, 20));
    expect(calls).toBe(2);
    await loop.stop();
  });
});
