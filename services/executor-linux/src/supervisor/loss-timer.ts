import type { Logger } from "./log.js";

/** What the controller-loss timer asks of its supervisor. */
export interface LossTimerDeps {
  readonly log: Logger;
  /** Policy CANCEL: otherwise the timer never arms. */
  readonly cancelsOnLoss: boolean;
  /** Controllers attached now. */
  readonly attached: () => number;
  /** Whether a loss could still matter: cleanup has not begun and no cancellation was asked for. */
  readonly armable: () => boolean;
  /** The loss: no controller attached for `ms`. */
  readonly onLost: (ms: number) => void;
}

/**
 * Policy CANCEL's timer: armed while no controller is attached and the job has not reached
 * cleanup; when it fires with still none attached, the supervisor cancels the job.
 */
export class LossTimer {
  readonly #d: LossTimerDeps;
  #timer: NodeJS.Timeout | undefined;

  constructor(deps: LossTimerDeps) {
    this.#d = deps;
  }

  /** Arms the timer for `ms` unless it runs already, a controller is attached, or a loss no longer matters. */
  arm(ms: number): void {
    const d = this.#d;
    if (!d.cancelsOnLoss || this.#timer !== undefined || !d.armable()) return;
    if (d.attached() > 0) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (d.attached() > 0 || !d.armable()) return;
      d.log.warn({ event: "controller_lost", graceMs: ms }, "no controller attached within the grace; cancelling (policy cancel)");
      d.onLost(ms);
    }, ms);
  }

  disarm(): void {
    if (this.#timer === undefined) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
