import { type Deployment, Deployment as DeploymentSchema } from "@denv/spec";
import { z } from "zod";
import type { ResponseSpec } from "../http/route.js";
import type { Services } from "../services/container.js";
import { presentDeployment } from "../services/present.js";
import type { DeploymentRecord } from "../store/records.js";

export const WaitQuery = z.object({
  /** Wait for the deployment to finish and answer 200 with its final state. */
  wait: z.stringbool().optional(),
});

export const DEPLOYMENT_RESPONSES: ResponseSpec[] = [
  { status: 202, description: "The deployment, started", schema: DeploymentSchema },
  {
    status: 200,
    description: "With ?wait=true: the finished deployment (status failed included)",
    schema: DeploymentSchema,
  },
];

/** 202 with the started deployment, or (wait) 200 with the finished one. */
export async function deploymentReply(
  s: Services,
  d: Deployment | DeploymentRecord,
  wait: boolean | undefined,
): Promise<{ status: number; body: Deployment }> {
  if (!wait)
    return { status: 202, body: "phases" in d && "state" in d ? presentDeployment(d) : (d as Deployment) };
  return { status: 200, body: presentDeployment(await s.deployments.wait(d.id)) };
}
