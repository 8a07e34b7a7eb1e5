import type { EC2Client, Instance } from "@aws-sdk/client-ec2";
import type { TargetRecord } from "../store/records.js";
import {
  credential,
  type MachineProvider,
  type ProviderMachine,
  type ProvisionDeps,
  ProvisionedDriver,
} from "./provisioned-driver.js";

interface AwsSettings {
  region: string;
  instance_type: string;
  image: string;
  subnet_id?: string;
  endpoint?: string;
}

/** The states of an instance that still is, or will be, a machine (not shutting-down or terminated). */
const LIVE_STATES = ["pending", "running", "stopping", "stopped"];

/** A failed EC2 call: the API's own error code and message, never a credential. */
export class AwsError extends Error {}

/**
 * AWS EC2: instances in the user's account, through the AWS SDK's EC2 client (RunInstances with
 * tags and user data, DescribeInstances filtered by tag, TerminateInstances). A machine's id is
 * its instance's `ai.denv.machine` tag (and its Name tag); the machine id is also RunInstances'
 * client token, so a create retried after a lost answer makes no second instance. The `endpoint`
 * setting points the client elsewhere than AWS's regional endpoint (tests: moto's server mode).
 * The SDK is loaded when an aws target is first used: a cp without one never pays for it.
 */
export class AwsDriver extends ProvisionedDriver {
  constructor(deps: ProvisionDeps) {
    super("aws", deps);
  }

  protected provider(target: TargetRecord, credentials: Record<string, string>): MachineProvider {
    const s = settingsOf(target);
    const auth = {
      accessKeyId: credential(target, credentials, "access_key_id"),
      secretAccessKey: credential(target, credentials, "secret_access_key"),
    };
    const call = async <T>(
      what: string,
      fn: (ec2: typeof import("@aws-sdk/client-ec2"), c: EC2Client) => Promise<T>,
    ) => {
      const ec2 = await import("@aws-sdk/client-ec2");
      const client = new ec2.EC2Client({
        region: s.region,
        credentials: auth,
        maxAttempts: 3,
        requestHandler: { connectionTimeout: 10_000, requestTimeout: 30_000 },
        ...(s.endpoint ? { endpoint: s.endpoint } : {}),
      });
      try {
        return await fn(ec2, client);
      } catch (err) {
        throw new AwsError(`AWS EC2 ${what} in ${s.region}: ${describe(err, s.endpoint)}`);
      } finally {
        client.destroy();
      }
    };
    const machine = (i: Instance): ProviderMachine | undefined => {
      const name = i.Tags?.find((t) => t.Key === "ai.denv.machine")?.Value;
      if (!i.InstanceId || !name) return undefined;
      const zone = i.Placement?.AvailabilityZone ?? s.region;
      return {
        providerId: i.InstanceId,
        machine: name,
        costClass: `aws/${i.InstanceType ?? s.instance_type}/${zone}`,
      };
    };

    return {
      list: (labels) =>
        call("DescribeInstances", async (ec2, c) => {
          const out: ProviderMachine[] = [];
          const filters = [
            ...Object.entries(labels).map(([k, v]) => ({ Name: `tag:${k}`, Values: [v] })),
            { Name: "instance-state-name", Values: LIVE_STATES },
          ];
          let next: string | undefined;
          do {
            const page = await c.send(
              new ec2.DescribeInstancesCommand({ Filters: filters, NextToken: next }),
            );
            for (const r of page.Reservations ?? []) {
              for (const i of r.Instances ?? []) {
                const m = machine(i);
                if (m) out.push(m);
              }
            }
            next = page.NextToken;
          } while (next);
          return out;
        }),
      create: (req) =>
        call("RunInstances", async (ec2, c) => {
          const tags = Object.entries({ ...req.labels, Name: req.machine }).map(([Key, Value]) => ({
            Key,
            Value,
          }));
          const r = await c.send(
            new ec2.RunInstancesCommand({
              ImageId: s.image,
              InstanceType: s.instance_type as Instance["InstanceType"],
              MinCount: 1,
              MaxCount: 1,
              ClientToken: req.machine,
              UserData: Buffer.from(req.userData).toString("base64"),
              ...(s.subnet_id ? { SubnetId: s.subnet_id } : {}),
              TagSpecifications: [
                { ResourceType: "instance", Tags: tags },
                { ResourceType: "volume", Tags: tags },
              ],
            }),
          );
          const made = r.Instances?.[0] && machine(r.Instances[0]);
          if (!made) throw new Error("RunInstances answered without the instance it created");
          return made;
        }),
      delete: (providerId) =>
        call("TerminateInstances", async (ec2, c) => {
          try {
            await c.send(new ec2.TerminateInstancesCommand({ InstanceIds: [providerId] }));
          } catch (err) {
            // Gone already: what delete is for.
            if ((err as { name?: string }).name === "InvalidInstanceID.NotFound") return;
            throw err;
          }
        }),
    };
  }

  protected costClass(target: TargetRecord): string {
    const s = settingsOf(target);
    return `aws/${s.instance_type}/${s.region}`;
  }
}

function settingsOf(t: TargetRecord): AwsSettings {
  return t.settings as unknown as AwsSettings;
}

/** The SDK's error as one line: its code and message, or where the endpoint could not be reached. */
function describe(err: unknown, endpoint: string | undefined): string {
  const e = err as { name?: string; message?: string; code?: string; $metadata?: unknown };
  if (e.code === "ECONNREFUSED" || e.code === "ENOTFOUND" || e.name === "TimeoutError") {
    return `${endpoint ?? "the regional endpoint"} cannot be reached (${e.code ?? e.name})`;
  }
  return `${e.name ?? "Error"}: ${(e.message ?? String(err)).split("\n")[0]}`;
}
