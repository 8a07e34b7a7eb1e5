// biome-ignore-all lint/suspicious/noTemplateCurlyInString: compose interpolation syntax (${VAR}) is what these tests are about
import { describe, expect, it } from "vitest";
import { ComposeReasons, Refusal } from "../messages.js";
import { accept, refusals, service } from "./compose-fixture.js";

const svc = Refusal.serviceKey;
const R = ComposeReasons;

describe("env_file", () => {
  const dotenv = [
    "# a comment",
    "",
    "PLAIN=plain value  # trailing comment",
    "HASH=a#b",
    "export EXPORTED=yes",
    "SINGLE='literal $PLAIN \\n'",
    'DOUBLE="tab\\there ${PLAIN} \\$HOME \\"q\\""',
    'QUOTED_COMMENT="v # kept" # dropped',
    "EMPTY=",
    "REF=${PLAIN}-${FROM_CTX}",
    'MULTI="line1',
    'line2"',
    "COLON: yaml style",
    "BARE_SET",
    "BARE_UNSET",
  ].join("\n");

  it("parses Docker Compose .env syntax", () => {
    const plan = accept("services:\n  app:\n    image: a\n    env_file: [conf/app.env]\n", {
      files: { "conf/app.env": dotenv },
      env: { FROM_CTX: "ctx", BARE_SET: "from shell" },
    });
    expect(service(plan, "app").environment).toEqual({
      PLAIN: "plain value",
      HASH: "a#b",
      EXPORTED: "yes",
      SINGLE: "literal $PLAIN \\n",
      DOUBLE: 'tab\there plain value $HOME "q"',
      QUOTED_COMMENT: "v # kept",
      EMPTY: "",
      REF: "plain value-ctx",
      MULTI: "line1\nline2",
      COLON: "yaml style",
      BARE_SET: "from shell",
    });
  });

  it("lets environment override env_file, later files override earlier", () => {
    const plan = accept(
      "services:\n  app:\n    image: a\n    env_file: [a.env, {path: b.env, required: true}, {path: c.env, required: false}]\n    environment: {X: inline}\n",
      { files: { "a.env": "X=a\nY=a\nZ=a", "b.env": "Y=b" } },
    );
    expect(service(plan, "app").environment).toEqual({ X: "inline", Y: "b", Z: "a" });
  });

  it("refuses files outside the project, missing files and bad lines", () => {
    expect(
      refusals(
        "services:\n  app:\n    image: a\n    env_file: [../secrets.env, /etc/environment, missing.env, bad.env, quote.env]\n",
        { files: { "bad.env": "OK=1\n9BAD=x", "quote.env": "A='open" } },
      ),
    ).toEqual([
      svc("app", "env_file", R.climbsOut("../secrets.env")),
      svc("app", "env_file", R.absolutePath("/etc/environment")),
      svc("app", "env_file", R.notFound("missing.env")),
      svc("app", "env_file", R.envFileLine("bad.env", 2, 'expected a variable name, got "9BAD=x"')),
      svc("app", "env_file", "'quote.env' line 1: the value of 'A' has no closing single quote"),
    ]);
  });
});
