/**
 * A level-free wake-up: `wait(ms)` resolves after `ms` or at the next `notify()`, whichever
 * comes first. Lets the supervisor loop sleep between polls yet react at once to a child's
 * pidfd, GO, a cancel or a fatal error.
 */
export class Wake {
  readonly #waiters = new Set<() => void>();

  /** Wakes every current waiter. */
  notify(): void {
    const ws = [...this.#waiters];
    this.#waiters.clear();
    for (const w of ws) w();
  }

  /** Resolves after `ms` milliseconds or at the next notify(). */
  wait(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.#waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      this.#waiters.add(done);
    });
  }
}
