import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import type { DockerClient } from "../docker/docker-client.js";
import { collectSubmission } from "./submission.js";

/** An engine whose archive stream starts and then never ends. */
function stallingEngine(): DockerClient {
  return {
    containers: {
      getArchive: async () => {
        const s = new PassThrough();
        s.write(Buffer.alloc(512));
        return s;
      },
    },
  } as unknown as DockerClient;
}

describe("collectSubmission", () => {
  it("gives up on a stream that stalls instead of hanging the episode", async () => {
    await expect(collectSubmission(stallingEngine(), "c", ["/app"], 200)).rejects.toThrow(
      "copying the submission path /app out of the fork took over 200 ms",
    );
  });
});
