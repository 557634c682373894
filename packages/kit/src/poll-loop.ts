/** A background loop that runs a pass, then sleeps until woken or until the poll interval. */
export interface PollLoop {
  /** Runs another pass soon: at once if sleeping, right after the current pass otherwise. */
  wake(): void;
  /** True once stop() was called; a long pass should check it between steps. */
  readonly stopped: boolean;
  /** Stops the loop and waits for the pass in flight. */
  stop(): Promise<void>;
}

/**
 * Starts the wake-or-poll loop every waiter in Seraph uses: signals only shorten the wait, the
 * slow poll makes a lost signal harmless. A pass that throws is reported to `onError` with the
 * count of consecutive failures and retried on the next tick.
 */
export function startPollLoop(o: {
  readonly pollMs: number;
  readonly pass: () => Promise<void>;
  readonly onError: (err: unknown, consecutiveFailures: number) => void;
}): PollLoop {
  let stopped = false;
  let woken = false;
  let wakeUp: (() => void) | undefined;
  const loop = (async () => {
    // The first pass starts on a later tick, so a pass may refer to the returned PollLoop.
    await Promise.resolve();
    let failures = 0;
    while (!stopped) {
      woken = false;
      try {
        await o.pass();
        failures = 0;
      } catch (err) {
        failures += 1;
        o.onError(err, failures);
      }
      if (stopped || woken) continue;
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, o.pollMs);
        wakeUp = () => {
          clearTimeout(t);
          resolve();
        };
      });
      wakeUp = undefined;
    }
  })();
  return {
    wake() {
      woken = true;
      wakeUp?.();
    },
    get stopped() {
      return stopped;
    },
    async stop() {
      stopped = true;
      wakeUp?.();
      await loop;
    },
  };
}
