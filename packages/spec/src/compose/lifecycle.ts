import { ComposeReasons } from "../messages.js";
import type { Healthcheck, ServicePlan } from "../plan.js";
import type { Refuse } from "./findings.js";
import { parseCount, parseDuration } from "./units.js";
import { booleanValue, describe, isExtensionKey, isMapping, scalarString, stringList } from "./values.js";

const DURATION = "a duration such as '30s', '1m30s' or '500ms'";

/** `stop_grace_period`, in milliseconds. */
export function parseStopGracePeriod(value: unknown, refuse: Refuse): number | undefined {
  const ms = parseDuration(value);
  if (ms === undefined) refuse("stop_grace_period", ComposeReasons.expected(DURATION, describe(value)));
  return ms;
}

/** `restart`: a Docker restart policy, `on-failure:N` split into the policy and its retries. */
export function parseRestart(value: unknown, refuse: Refuse, plan: ServicePlan): void {
  const text = scalarString(value) ?? String(value);
  const retries = /^on-failure:(\d+)$/.exec(text);
  if (text === "no" || text === "always" || text === "on-failure" || text === "unless-stopped") {
    plan.restart = text;
  } else if (retries !== null) {
    plan.restart = "on-failure";
    plan.restartMaxRetries = Number(retries[1]);
  } else {
    refuse("restart", ComposeReasons.restart(text));
  }
}

/** `healthcheck`: `disable: true` becomes the test NONE, which turns off the image's own. */
export function parseHealthcheck(value: unknown, refuse: Refuse): Healthcheck | undefined {
  const key = "healthcheck";
  if (!isMapping(value)) {
    refuse(key, ComposeReasons.expected("a mapping", describe(value)));
    return undefined;
  }
  // An empty test keeps the image's own HEALTHCHECK, with the timings given here.
  const healthcheck: Healthcheck = { test: [] };
  let disable = false;
  const durations: Record<string, "intervalMs" | "timeoutMs" | "startPeriodMs" | "startIntervalMs"> = {
    interval: "intervalMs",
    timeout: "timeoutMs",
    start_period: "startPeriodMs",
    start_interval: "startIntervalMs",
  };
  for (const [k, v] of Object.entries(value)) {
    if (isExtensionKey(k) || v === null) continue;
    const field = Object.hasOwn(durations, k) ? durations[k] : undefined;
    if (field !== undefined) {
      const ms = parseDuration(v);
      if (ms === undefined) refuse(`${key}.${k}`, ComposeReasons.expected(DURATION, describe(v)));
      else healthcheck[field] = ms;
    } else if (k === "test") {
      const test = typeof v === "string" && v !== "" ? ["CMD-SHELL", v] : stringList(v);
      const head = test?.[0];
      const valid =
        test !== undefined &&
        (head === "NONE" ||
          (head === "CMD" && test.length >= 2) ||
          (head === "CMD-SHELL" && test.length === 2 && test[1] !== ""));
      if (!valid) refuse(`${key}.test`, ComposeReasons.healthcheckTest);
      else healthcheck.test = test;
    } else if (k === "retries") {
      const retries = parseCount(v);
      if (retries === undefined)
        refuse(`${key}.retries`, ComposeReasons.expected("a whole number", describe(v)));
      else healthcheck.retries = retries;
    } else if (k === "disable") {
      const b = booleanValue(v);
      if (b === undefined) refuse(`${key}.disable`, ComposeReasons.expected("true or false", describe(v)));
      else disable = b;
    } else {
      refuse(`${key}.${k}`, ComposeReasons.unknownKey);
    }
  }
  if (disable) {
    if (healthcheck.test.length > 0) {
      refuse(`${key}.disable`, ComposeReasons.healthcheckDisabledWithTest);
      return undefined;
    }
    return { test: ["NONE"] };
  }
  return healthcheck;
}
