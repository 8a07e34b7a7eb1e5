import { DenvError } from "./errors.js";

/** Project and environment names: what fits in Docker names, DNS labels and URLs alike. */
export const NAME_PATTERN = /^[a-z0-9][a-z0-9-]{0,39}$/;

export function checkName(what: "project" | "environment", name: string): string {
  if (!NAME_PATTERN.test(name)) {
    throw new DenvError(
      "invalid_request",
      `invalid ${what} name '${name}': use 1-40 lowercase letters, digits and '-', starting with a letter or digit`,
    );
  }
  return name;
}

/** `PROJECT/ENV` -> parts; ENV defaults to alpha. */
export function parseEnvRef(ref: string): { project: string; environment: string } {
  const [project = "", environment = "alpha", ...rest] = ref.split("/");
  if (rest.length > 0)
    throw new DenvError("invalid_request", `invalid environment '${ref}': expected PROJECT/ENV`);
  return { project: checkName("project", project), environment: checkName("environment", environment) };
}

/** `PROJECT@vN` -> parts. */
export function parseVersionRef(ref: string): { project: string; number: number } {
  const m = /^([^@]+)@v(\d+)$/.exec(ref);
  if (!m) throw new DenvError("invalid_request", `invalid version '${ref}': expected PROJECT@vN`);
  return { project: checkName("project", m[1] as string), number: Number(m[2]) };
}
