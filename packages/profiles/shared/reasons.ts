import { create } from "@bufbuild/protobuf";
import { BlockReasonSchema, type BlockReason } from "@seraph/proto/seraph/profile/v1/profile_pb.js";

/**
 * Every stable reason code the profile can block with. Codes are snake_case and never reused
 * for another meaning; the sentence that accompanies a code may be reworded.
 */
export const REASON_CODES = [
  // selection and limits
  "selection_empty",
  "selection_unknown",
  "limit_unknown",
  "limit_invalid",
  // runtime
  "runtime_not_installed",
  "runtime_path_not_absolute",
  "runtime_missing",
  "runtime_not_regular_file",
  "runtime_not_executable",
  "runtime_version_unreadable",
  "runtime_version_mismatch",
  "runtime_hash_mismatch",
  "runtime_inside_repository",
  // repository and package.json
  "repository_path_not_absolute",
  "repository_not_found",
  "repository_not_directory",
  "package_json_missing",
  "package_json_invalid",
  "scripts_invalid",
  "script_missing",
  // script grammar
  "script_empty",
  "script_non_ascii",
  "script_chaining",
  "script_redirect",
  "script_expansion",
  "script_quote",
  "script_glob",
  "script_shell_metacharacter",
  "script_env_assignment",
  "script_package_manager",
  "script_wrapper_not_allowed",
  "script_test_runner_not_allowed",
  "script_command_not_allowed",
  "script_flag_not_allowed",
  "script_watch_mode",
  "script_form_not_allowed",
  "script_test_paths_missing",
  "script_entrypoint_missing",
  "script_too_many_arguments",
  "too_many_test_paths",
  "test_path_extension",
  "entrypoint_extension",
  "tsconfig_extension",
  "tsc_project_missing",
  "tsc_without_tsconfig",
  "path_absolute",
  "path_traversal",
  "path_invalid",
  "path_in_node_modules",
  "path_not_found",
  "path_is_directory",
  "path_not_regular_file",
  "path_in_output_dir",
  // lockfile, TypeScript, tsconfig
  "lockfile_missing",
  "lockfile_ambiguous",
  "lockfile_foreign",
  "lockfile_invalid",
  "lockfile_version_unsupported",
  "typescript_missing",
  "typescript_lock_mismatch",
  "typescript_compiler_missing",
  "tsconfig_invalid",
  "tsconfig_extends_absolute",
  "tsconfig_extends_outside_package",
  "tsconfig_extends_unresolved",
  "tsconfig_extends_cycle",
  "tsconfig_references_not_supported",
  "build_output_undeclared",
  "build_output_dir_invalid",
  // sources and snapshot bounds
  "source_path_invalid",
  "source_path_not_found",
  "source_in_output_dir",
  // no longer emitted (internal source links are staged as links since they resolve in the snapshot)
  "source_symlink_not_supported",
  "link_escapes_repository",
  "link_target_excluded",
  "link_target_not_found",
  "link_cycle",
  "special_file",
  "source_file_too_large",
  "too_many_source_files",
  "snapshot_too_large",
  "tree_walk_exceeded",
  // dependency tree
  "too_many_dependency_files",
  "dependency_file_too_large",
  "foreign_package_root",
  "link_escapes_snapshot",
  "bin_link_escapes",
  "bin_alias_unknown",
  "dependency_lock_mismatch",
  "dependency_not_in_lockfile",
  // patch
  "patch_too_large",
  "patch_invalid",
  "patch_empty",
  "patch_binary",
  "patch_rename_not_supported",
  "patch_mode_change",
  "patch_path_invalid",
  "patch_path_not_allowed",
  "patch_touches_immutable_input",
  "patch_touches_output_dir",
  "patch_target_not_in_snapshot",
  "patch_target_exists",
  "patch_target_is_link",
  "patch_deletes_step_input",
  "patch_duplicate_file",
  "patch_does_not_apply",
  "patch_result_too_large",
  // staging, drift and build output
  "drift",
  "stage_failed",
  "build_output_missing",
  "build_output_link",
  "build_output_special_file",
  "build_output_too_large",
  "build_wrote_outside_output_dir",
  "test_path_missing_after_build",
  // execution
  "wall_deadline_exhausted",
  "supervisor_failed",
  "supervisor_spec_invalid",
] as const;

/** One stable reason code. */
export type ReasonCode = (typeof REASON_CODES)[number];

/** Builds a BlockReason message: a stable code, a sentence a user understands, and its subject. */
export function blockReason(code: ReasonCode, message: string, subject = ""): BlockReason {
  return create(BlockReasonSchema, { code, message, subject });
}

/** Formats a count the way the messages do ("4,213"). */
export function formatCount(n: number | bigint): string {
  return Number(n).toLocaleString("en-US");
}
