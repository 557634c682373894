import { create } from "@bufbuild/protobuf";
import { ExecutionProfileInfoSchema, ProfileSelectionSchema, type ExecutionProfileInfo } from "@seraph/proto/seraph/api/v1/settings_pb.js";
import { EXECUTION_PROFILES } from "@seraph/profiles/registry";

/**
 * Every registered execution profile as ListProfiles serves it, the default first: its name,
 * title, runtime words, default runtime path and selection, and the selections it offers, so
 * the UI and the CLI offer profiles from the server's registry instead of naming them.
 */
export function profileCatalog(): ExecutionProfileInfo[] {
  // The registry lists the default first (registry DEFAULT_PROFILE is EXECUTION_PROFILES[0]).
  return EXECUTION_PROFILES.map((p, i) =>
    create(ExecutionProfileInfoSchema, {
      name: p.name,
      title: p.title,
      isDefault: i === 0,
      runtimeDescription: p.runtimeWords,
      defaultRuntimePath: p.defaultRuntimePath,
      defaultSelection: p.defaultSelectionText,
      selections: p.selections.map((s) =>
        create(ProfileSelectionSchema, { selection: s.selection, title: s.title, tokens: [...s.tokens], takesTestFiles: s.takesTestFiles, execution: s.execution }),
      ),
    }),
  );
}
