import { DenvError } from "@denv/spec";
import type { DockerClient } from "../docker/docker-client.js";
import { readContainerFile } from "./principals.js";

export const REWARD_DIR = "/logs/verifier";

/** reward.json (an object of numbers; "reward" is the main one) or reward.txt (one float). */
export async function readReward(
  docker: DockerClient,
  containerId: string,
): Promise<{ reward: number; rewards: Record<string, number> } | undefined> {
  for (const name of REWARD_FILES) {
    const body = await readContainerFile(docker, containerId, `${REWARD_DIR}/${name}`);
    if (body === undefined) continue;
    return parseReward(name, body.toString("utf8"));
  }
  return undefined;
}

/** The files a verifier may write its reward to, in the order they are looked for. */
export const REWARD_FILES = ["reward.json", "reward.txt"] as const;

/** A reward file's text as the grade. @throws DenvError `verifier_failed` when it holds none. */
export function parseReward(
  name: (typeof REWARD_FILES)[number],
  body: string,
): { reward: number; rewards: Record<string, number> } {
  const text = body.trim();
  return name === "reward.txt" ? parseRewardText(text) : parseRewardJson(text);
}

function parseRewardText(text: string): { reward: number; rewards: Record<string, number> } {
  const value = Number(text);
  if (!Number.isFinite(value)) {
    throw new DenvError("verifier_failed", `reward.txt does not hold a number: '${text.slice(0, 80)}'`);
  }
  return { reward: value, rewards: { reward: value } };
}

function parseRewardJson(text: string): { reward: number; rewards: Record<string, number> } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new DenvError("verifier_failed", "reward.json is not valid JSON");
  }
  if (typeof parsed === "number") return { reward: parsed, rewards: { reward: parsed } };
  if (!parsed || typeof parsed !== "object") {
    throw new DenvError("verifier_failed", "reward.json must hold an object of numbers");
  }
  const rewards: Record<string, number> = {};
  for (const [k, v] of Object.entries(parsed)) if (typeof v === "number") rewards[k] = v;
  const values = Object.values(rewards);
  const main = rewards.reward ?? (values.length === 1 ? values[0] : undefined);
  if (main === undefined) throw new DenvError("verifier_failed", "reward.json has no numeric 'reward' key");
  return { reward: main, rewards };
}
