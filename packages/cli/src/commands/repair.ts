import type { CommandGroup } from "../command-spec.js";
import { approve, baseline } from "./repair/approve.js";
import { attempts } from "./repair/attempts.js";
import { attestation } from "./repair/attestation.js";
import { create } from "./repair/create.js";
import { logs } from "./repair/logs.js";
import { cancel, recover, results } from "./repair/outcome.js";
import { consent, propose } from "./repair/propose.js";
import { diff, list, show, source } from "./repair/read.js";
import { watch } from "./repair/watch.js";

/** `seraph repair ...`: the repair journey from the command line, one module per step. */
export const repair: CommandGroup = {
  name: "repair",
  summary: "The repair journey: create (inspect, or copy one with --from), read the source, consent, propose a patch, approve the exact execution, watch, results and the signed receipt, propose another patch (attempts), cancel, recover.",
  subcommands: { create, list, show, attempts, watch, diff, logs, source, consent, propose, approve, baseline, results, attestation, cancel, recover },
};
