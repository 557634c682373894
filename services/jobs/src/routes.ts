import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";
import { JobsService } from "@seraph/proto/seraph/jobs/v1/jobs_pb.js";

/** Registers the internal jobs API. */
export function createJobsRoutes(service: ServiceImpl<typeof JobsService>): (router: ConnectRouter) => void {
  return (router) => {
    router.service(JobsService, service);
  };
}
