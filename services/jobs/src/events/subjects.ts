/** NATS subjects (see proto/seraph/events/v1/events.proto). */
export const Subjects = Object.freeze({
  jobState: (jobId: string) => `seraph.jobs.${jobId}.state`,
  slot: (nodeId: string, slotIndex: number) => `seraph.slots.${nodeId}.${slotIndex}`,
  nodeWork: (nodeId: string) => `seraph.nodes.${nodeId}.work`,
  nodeCancel: (nodeId: string) => `seraph.nodes.${nodeId}.cancel`,
  workQueued: "seraph.work.queued",
});
