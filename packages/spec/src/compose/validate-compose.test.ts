// biome-ignore-all lint/suspicious/noTemplateCurlyInString: compose interpolation syntax (${VAR}) is what these tests are about
import { describe, expect, it } from "vitest";
import {
  ComposeMessages,
  ComposeNotes,
  ComposeReasons,
  DefaultCaps,
  Refusal,
  RefusedServiceKeys,
} from "../messages.js";
import type { Plan, ServicePlan } from "../plan.js";
import type { ComposeContext } from "./compose-context.js";
import { type ValidateResult, validateCompose } from "./validate-compose.js";

interface Fixture {
  env?: Record<string, string>;
  /** Project-relative files (their folders exist too). */
  files?: Record<string, string>;
  projectName?: string;
}

function context(fixture: Fixture = {}): ComposeContext {
  const files = fixture.files ?? {};
  return {
    env: fixture.env ?? {},
    readFile: (rel) => (Object.hasOwn(files, rel) ? files[rel] : undefined),
    exists: (rel) =>
      rel === "." || Object.hasOwn(files, rel) || Object.keys(files).some((f) => f.startsWith(`${rel}/`)),
    projectName: fixture.projectName ?? "demo",
    source: "compose.yaml",
  };
}

function accept(yaml: string, fixture?: Fixture): Plan {
  const result = validateCompose(yaml, context(fixture));
  if (!result.ok) throw new Error(`expected the file to be accepted, got:\n${result.refusals.join("\n")}`);
  return result.plan;
}

function refusals(yaml: string, fixture?: Fixture): string[] {
  const result: ValidateResult = validateCompose(yaml, context(fixture));
  if (result.ok) throw new Error("expected refusals, the file was accepted");
  return result.refusals;
}

function service(plan: Plan, name: string): ServicePlan {
  const found = plan.services.find((s) => s.name === name);
  if (found === undefined) throw new Error(`no service ${name}`);
  return found;
}

const svc = Refusal.serviceKey;
const top = Refusal.topKey;
const R = ComposeReasons;

describe("accepted files", () => {
  const cases: { name: string; yaml: string; fixture?: Fixture; check: (plan: Plan) => void }[] = [
    {
      name: "one image service with every default",
      yaml: "services:\n  app:\n    image: alpine:3.20\n",
      check: (plan) => {
        expect(plan.name).toBe("demo");
        expect(plan.kind).toBe("rl-environment");
        expect(plan.egress).toBe("deny");
        expect(plan.agent).toEqual({ service: "app", user: "1000", workdir: "/workspace" });
        expect(plan.services).toHaveLength(1);
        expect(service(plan, "app")).toEqual({
          name: "app",
          image: "alpine:3.20",
          environment: {},
          volumes: [],
          tmpfs: [],
          dependsOn: [],
          expose: [],
          labels: {},
          capDrop: [],
          aliases: ["app"],
          resources: { ...DefaultCaps },
          ports: [],
          dnsOpt: ["timeout:1", "attempts:1"],
        });
        expect(plan.verifier).toBeUndefined();
        expect(plan.notes).toEqual([]);
      },
    },
    {
      name: "every accepted service key",
      fixture: { files: { "app/Dockerfile.dev": "FROM alpine", "app.env": "FROM_FILE=1\nSHARED=file\n" } },
      yaml: `
name: full
services:
  db:
    image: postgres:16
    expose: ["5432", 8000-8001, 53/udp]
  app:
    build:
      context: ./app
      dockerfile: Dockerfile.dev
      args: [VERSION=1.2]
      target: dev
    command: [sleep, infinity]
    entrypoint: /bin/sh -c
    environment: [SHARED=inline, MODE=test]
    env_file: app.env
    working_dir: /srv
    user: "1000:1000"
    volumes: ["data:/data:ro", {type: volume, source: data, target: /data2}, {type: tmpfs, target: /scratch, tmpfs: {size: 64m}}]
    tmpfs: [/run, "/tmp:size=16m"]
    depends_on:
      db: {condition: service_healthy}
    healthcheck:
      test: curl -f http://localhost/
      interval: 1m30s
      timeout: 500ms
      start_period: 10s
      start_interval: 1s
      retries: 3
    labels: {com.example.team: rl}
    init: true
    stop_grace_period: 1m
    restart: on-failure:3
    cap_drop: [net_raw, ALL]
    networks:
      back: {aliases: [api]}
    mem_limit: 512m
    cpus: 0.5
    pids_limit: 256
    hostname: app-host
    dns_opt: [ndots:1]
    platform: linux/amd64
    security_opt: []
    privileged: false
x-denv: {agent: app}
volumes:
  data: {driver: local}
networks:
  back: {driver: bridge}
`,
      check: (plan) => {
        expect(plan.name).toBe("full");
        expect(service(plan, "db").expose).toEqual([5432, 8000, 8001, 53]);
        const app = service(plan, "app");
        expect(app).toEqual({
          name: "app",
          image: "denv-local/full-app:latest",
          build: { context: "app", dockerfile: "Dockerfile.dev", args: { VERSION: "1.2" }, target: "dev" },
          command: ["sleep", "infinity"],
          entrypoint: "/bin/sh -c",
          environment: { FROM_FILE: "1", SHARED: "inline", MODE: "test" },
          workingDir: "/srv",
          user: "1000:1000",
          volumes: [
            { source: "data", target: "/data", readOnly: true },
            { source: "data", target: "/data2", readOnly: false },
          ],
          tmpfs: ["/run", "/tmp:size=16m", `/scratch:size=${64 * 1024 * 1024}`],
          dependsOn: [{ service: "db", condition: "service_healthy" }],
          healthcheck: {
            test: ["CMD-SHELL", "curl -f http://localhost/"],
            intervalMs: 90_000,
            timeoutMs: 500,
            startPeriodMs: 10_000,
            startIntervalMs: 1000,
            retries: 3,
          },
          expose: [],
          labels: { "com.example.team": "rl" },
          init: true,
          stopGracePeriodMs: 60_000,
          restart: "on-failure",
          restartMaxRetries: 3,
          capDrop: ["NET_RAW", "ALL"],
          aliases: ["app", "api"],
          resources: { memoryBytes: 512 * 1024 * 1024, cpus: 0.5, pids: 256 },
          ports: [],
          dnsOpt: ["ndots:1"],
          hostname: "app-host",
          platform: "linux/amd64",
        });
      },
    },
    {
      name: "network_mode none",
      yaml: "services:\n  app:\n    image: alpine\n    network_mode: none\n",
      check: (plan) => expect(service(plan, "app").networkMode).toBe("none"),
    },
    {
      name: "ports on a service project",
      yaml: `
services:
  web:
    image: nginx
    ports: ["8080:80", "127.0.0.1:9000-9001:9000-9001/udp", 3000, {target: 443, published: 8443, host_ip: 0.0.0.0}]
x-denv: {kind: service, egress: allow}
`,
      check: (plan) => {
        expect(plan.kind).toBe("service");
        expect(plan.egress).toBe("allow");
        expect(service(plan, "web").ports).toEqual([
          { target: 80, published: 8080, protocol: "tcp" },
          { target: 9000, published: 9000, protocol: "udp", hostIp: "127.0.0.1" },
          { target: 9001, published: 9001, protocol: "udp", hostIp: "127.0.0.1" },
          { target: 3000, protocol: "tcp" },
          { target: 443, published: 8443, protocol: "tcp", hostIp: "0.0.0.0" },
        ]);
        // A service project keeps Docker's resolver defaults.
        expect(service(plan, "web").dnsOpt).toEqual([]);
      },
    },
    {
      name: "healthcheck disabled, list test, deploy limits",
      yaml: `
services:
  a:
    image: alpine
    healthcheck: {disable: true}
    deploy: {replicas: 1, resources: {limits: {memory: 1g, cpus: "1.5", pids: 100}}}
  b:
    image: alpine
    healthcheck: {test: [CMD, "true"], retries: 2}
    mem_limit: 1073741824
    deploy: {resources: {limits: {memory: 1g}}}
x-denv: {agent: a}
`,
      check: (plan) => {
        expect(service(plan, "a").healthcheck).toEqual({ test: ["NONE"] });
        expect(service(plan, "a").resources).toEqual({ memoryBytes: 1024 ** 3, cpus: 1.5, pids: 100 });
        expect(service(plan, "b").healthcheck).toEqual({ test: ["CMD", "true"], retries: 2 });
        expect(service(plan, "b").resources.memoryBytes).toBe(1024 ** 3);
      },
    },
    {
      name: "version is ignored with a note",
      yaml: "version: '3.8'\nservices:\n  app:\n    image: alpine\n",
      check: (plan) => expect(plan.notes).toEqual([ComposeNotes.versionObsolete]),
    },
    {
      name: "extension fields anywhere are ignored",
      yaml: "x-top: 1\nservices:\n  app:\n    image: alpine\n    x-mine: {anything: [1]}\nvolumes:\n  v:\n    x-note: hi\n",
      check: (plan) => expect(plan.volumes).toEqual(["v"]),
    },
    {
      name: "null keys are unset",
      yaml: "services:\n  app:\n    image: alpine\n    command:\n    environment:\nvolumes:\n  data:\n",
      check: (plan) => {
        expect(service(plan, "app").command).toBeUndefined();
        expect(plan.volumes).toEqual(["data"]);
      },
    },
  ];
  for (const c of cases) {
    it(c.name, () => c.check(accept(c.yaml, c.fixture)));
  }
});

describe("refused files", () => {
  const one = (key: string, reason: string, extra = "") => ({
    yaml: `services:\n  app:\n    image: alpine\n${extra}`,
    expected: [svc("app", key, reason)],
  });
  const cases: { name: string; yaml: string; fixture?: Fixture; expected: string[] }[] = [
    { name: "privileged", ...one("privileged", R.privileged, "    privileged: true\n") },
    { name: "cap_add", ...one("cap_add", R.capAdd, "    cap_add: [SYS_ADMIN]\n") },
    { name: "devices", ...one("devices", R.devices, "    devices: [/dev/kvm]\n") },
    { name: "network_mode host", ...one("network_mode", R.networkModeHost, "    network_mode: host\n") },
    {
      name: "network_mode service:",
      ...one("network_mode", R.networkModeJoin("db"), "    network_mode: service:db\n"),
    },
    {
      name: "network_mode bridge",
      ...one("network_mode", R.networkModeOther("bridge"), "    network_mode: bridge\n"),
    },
    { name: "pid host", ...one("pid", R.namespaceHost("PID"), "    pid: host\n") },
    { name: "ipc of a container", ...one("ipc", R.namespaceJoin("IPC", "x"), "    ipc: container:x\n") },
    { name: "uts host", ...one("uts", R.namespaceHost("UTS"), "    uts: host\n") },
    { name: "userns_mode host", ...one("userns_mode", R.namespaceHost("user"), "    userns_mode: host\n") },
    { name: "cgroup_parent", ...one("cgroup_parent", R.cgroupParent, "    cgroup_parent: mine\n") },
    { name: "runtime", ...one("runtime", R.runtime, "    runtime: runc\n") },
    {
      name: "security_opt seccomp unconfined",
      ...one(
        "security_opt",
        R.securityOptDisables("seccomp=unconfined"),
        "    security_opt: [seccomp=unconfined]\n",
      ),
    },
    {
      name: "security_opt no-new-privileges:false",
      ...one(
        "security_opt",
        R.securityOptDisables("no-new-privileges:false"),
        "    security_opt: ['no-new-privileges:false']\n",
      ),
    },
    {
      name: "security_opt other values",
      ...one("security_opt", R.securityOptOther("label:type:x"), "    security_opt: ['label:type:x']\n"),
    },
    { name: "sysctls", ...one("sysctls", R.sysctls, "    sysctls: {net.ipv4.ip_forward: 1}\n") },
    { name: "extra_hosts", ...one("extra_hosts", R.extraHosts, "    extra_hosts: ['a:1.2.3.4']\n") },
    { name: "dns", ...one("dns", R.dns, "    dns: 8.8.8.8\n") },
    { name: "volumes_from", ...one("volumes_from", R.volumesFrom, "    volumes_from: [x]\n") },
    { name: "links", ...one("links", R.links, "    links: [db]\n") },
    { name: "external_links", ...one("external_links", R.externalLinks, "    external_links: [db]\n") },
    { name: "container_name", ...one("container_name", R.containerName, "    container_name: fixed\n") },
    { name: "tty", ...one("tty", RefusedServiceKeys.tty ?? "", "    tty: true\n") },
    { name: "unknown key", ...one("enviroment", R.unknownKey, "    enviroment: {A: 1}\n") },
    {
      name: "docker socket",
      ...one(
        "volumes",
        R.dockerSocket("/var/run/docker.sock:/var/run/docker.sock"),
        "    volumes: [/var/run/docker.sock:/var/run/docker.sock]\n",
      ),
    },
    { name: "bind mount", ...one("volumes", R.bindMount("./src:/src"), "    volumes: [./src:/src]\n") },
    {
      name: "long bind mount",
      ...one("volumes", R.bindMount("/etc"), "    volumes: [{type: bind, source: /etc, target: /etc}]\n"),
    },
    { name: "anonymous volume", ...one("volumes", R.anonymousVolume("/data"), "    volumes: [/data]\n") },
    {
      name: "undeclared volume",
      ...one("volumes", R.undeclaredVolume("data"), "    volumes: [data:/data]\n"),
    },
    {
      name: "ports on an rl-environment",
      ...one("ports", R.portsOnRlEnvironment, "    ports: ['8080:80']\n"),
    },
    {
      name: "labels with the ai.denv. prefix",
      ...one("labels", R.labelPrefix("ai.denv.role"), "    labels: [ai.denv.role=x]\n"),
    },
    { name: "pids_limit -1", ...one("pids_limit", R.uncappedPids, "    pids_limit: -1\n") },
    {
      name: "mem_limit garbage",
      ...one(
        "mem_limit",
        R.expected("a memory size such as '512m', '1g' or a number of bytes", 'the string "lots"'),
        "    mem_limit: lots\n",
      ),
    },
    {
      name: "deploy keys other than resources.limits",
      ...one("deploy.replicas", R.replicas, "    deploy: {replicas: 3}\n"),
    },
    {
      name: "deploy reservations",
      ...one(
        "deploy.resources.reservations",
        R.reservations,
        "    deploy: {resources: {reservations: {memory: 1g}}}\n",
      ),
    },
    {
      name: "conflicting caps",
      ...one(
        "deploy.resources.limits.memory",
        R.conflictingCap("mem_limit", "deploy.resources.limits.memory"),
        "    mem_limit: 1g\n    deploy: {resources: {limits: {memory: 2g}}}\n",
      ),
    },
    {
      name: "healthcheck disable with a test",
      ...one(
        "healthcheck.disable",
        R.healthcheckDisabledWithTest,
        "    healthcheck: {test: [CMD, x], disable: true}\n",
      ),
    },
    { name: "bad restart", ...one("restart", R.restart("sometimes"), "    restart: sometimes\n") },
    { name: "relative working_dir", ...one("working_dir", R.notAbsolute("srv"), "    working_dir: srv\n") },
    {
      name: "undeclared network",
      ...one("networks", R.undeclaredNetwork("front"), "    networks: [front]\n"),
    },
    {
      name: "missing image and build",
      yaml: "services:\n  app:\n    command: x\n",
      expected: [ComposeMessages.serviceMissing("app", "image", "give 'image' or 'build'")],
    },
    {
      name: "build context outside the project",
      yaml: "services:\n  app:\n    build: ../elsewhere\n",
      expected: [svc("app", "build.context", R.climbsOut("../elsewhere"))],
    },
    {
      name: "absolute build context",
      yaml: "services:\n  app:\n    build: {context: /srv/app}\n",
      expected: [svc("app", "build.context", R.absolutePath("/srv/app"))],
    },
    {
      name: "missing build context",
      yaml: "services:\n  app:\n    build: ./nope\n",
      expected: [svc("app", "build.context", R.notFound("./nope"))],
    },
    {
      name: "remote build context",
      yaml: "services:\n  app:\n    build: https://github.com/o/r.git\n",
      expected: [svc("app", "build.context", R.remoteContext("https://github.com/o/r.git"))],
    },
    {
      name: "build network",
      fixture: { files: { Dockerfile: "" } },
      yaml: "services:\n  app:\n    build: {context: ., network: host}\n",
      expected: [svc("app", "build.network", R.buildHostAccess("network"))],
    },
    {
      name: "external volume, foreign driver",
      yaml: "services:\n  app:\n    image: a\nvolumes:\n  v: {external: true}\n  w: {driver: nfs}\n",
      expected: [top("volumes.v.external", R.externalVolume), top("volumes.w.driver", R.volumeDriver("nfs"))],
    },
    {
      name: "external and overlay networks",
      yaml: "services:\n  app:\n    image: a\nnetworks:\n  n: {external: true}\n  o: {driver: overlay}\n",
      expected: [
        top("networks.n.external", R.externalNetwork),
        top("networks.o.driver", R.networkDriver("overlay")),
      ],
    },
    {
      name: "unknown and refused top-level keys",
      yaml: "services:\n  app:\n    image: a\nsecrets:\n  s: {file: ./s}\nfrobnicate: 1\n",
      expected: [top("secrets", R.secretsConfigs), top("frobnicate", R.unknownKey)],
    },
    {
      name: "no services",
      yaml: "name: x\n",
      expected: [ComposeMessages.noServices("compose.yaml")],
    },
    {
      name: "not a mapping",
      yaml: "- a\n- b\n",
      expected: [ComposeMessages.notMapping("compose.yaml")],
    },
    {
      name: "YAML syntax error",
      yaml: "services:\n  a: [1\n",
      expected: [
        "compose.yaml is not valid YAML: Flow sequence in block collection must be sufficiently indented and end with a ] (line 3, column 1)",
      ],
    },
    {
      name: "duplicate keys",
      yaml: "services:\n  a:\n    image: x\n    image: y\n",
      expected: ["compose.yaml is not valid YAML: Map keys must be unique (line 4, column 5)"],
    },
  ];
  for (const c of cases) {
    it(c.name, () => expect(refusals(c.yaml, c.fixture)).toEqual(c.expected));
  }

  it("collects every refusal instead of stopping at the first", () => {
    const lines = refusals(`
services:
  app:
    image: alpine
    privileged: true
    cap_add: [NET_ADMIN]
    volumes: [/var/run/docker.sock:/var/run/docker.sock]
  db:
    image: postgres
    network_mode: host
    frobnicate: yes
`);
    expect(lines).toEqual([
      "service 'app': 'privileged' is refused: privileged containers can escape isolation",
      "service 'app': 'cap_add' is refused: added capabilities widen what a process can do to the host kernel; only cap_drop is accepted",
      "service 'app': 'volumes' is refused: '/var/run/docker.sock:/var/run/docker.sock' mounts the Docker socket, which controls the host",
      "service 'db': 'network_mode' is refused: host networking shares the host's network stack and bypasses the egress block (protection 5)",
      "service 'db': 'frobnicate' is refused: it is not a key denv knows; unknown keys are refused, never dropped",
      ComposeMessages.agentNeeded(["app", "db"]),
    ]);
    for (const line of lines) expect(line).not.toContain("\n");
  });

  it("names the agent refusal literally", () => {
    expect(refusals("services:\n  api:\n    image: a\n  db:\n    image: b\n")).toEqual([
      "'x-denv.agent' is needed: the file has 2 services (api, db) and none is named 'main' or 'default'; set x-denv.agent to the service the agent works in",
    ]);
  });

  it("accepts a refused key set to its default", () => {
    const plan = accept(
      "services:\n  app:\n    image: a\n    privileged: false\n    cap_add: []\n    tty: false\n",
    );
    expect(plan.services).toHaveLength(1);
  });
});

describe("defaults", () => {
  it("picks the only service, then main, then default", () => {
    expect(accept("services:\n  solo:\n    image: a\n").agent.service).toBe("solo");
    expect(accept("services:\n  db:\n    image: a\n  main:\n    image: b\n").agent.service).toBe("main");
    expect(accept("services:\n  db:\n    image: a\n  default:\n    image: b\n").agent.service).toBe(
      "default",
    );
    expect(accept("services:\n  main:\n    image: a\n  default:\n    image: b\n").agent.service).toBe("main");
  });

  it("takes the agent's user from x-denv, else a non-root service user, else uid 1000", () => {
    const base = "services:\n  main:\n    image: a\n";
    expect(accept(base).agent.user).toBe("1000");
    expect(accept(`${base}    user: root\n`).agent.user).toBe("1000");
    expect(accept(`${base}    user: "0:0"\n`).agent.user).toBe("1000");
    expect(accept(`${base}    user: agent\n`).agent.user).toBe("agent");
    expect(accept(`${base}    user: agent\nx-denv: {agent: {user: "2000"}}\n`).agent.user).toBe("2000");
  });

  it("takes the workdir from x-denv, else working_dir, else /workspace", () => {
    const base = "services:\n  main:\n    image: a\n";
    expect(accept(base).agent.workdir).toBe("/workspace");
    expect(accept(`${base}    working_dir: /src\n`).agent.workdir).toBe("/src");
    expect(accept(`${base}    working_dir: /src\nx-denv: {agent: {workdir: /w}}\n`).agent.workdir).toBe("/w");
  });

  it("caps every service from the file, else x-denv.resources, else DefaultCaps", () => {
    const plan = accept(`
services:
  a: {image: x, mem_limit: 256m}
  b: {image: x}
x-denv:
  agent: a
  resources: {cpus: 1, pids: 64}
`);
    expect(service(plan, "a").resources).toEqual({ memoryBytes: 256 * 1024 ** 2, cpus: 1, pids: 64 });
    expect(service(plan, "b").resources).toEqual({ memoryBytes: DefaultCaps.memoryBytes, cpus: 1, pids: 64 });
  });

  it("gives rl-environment services a fail-fast resolver unless dns_opt is set", () => {
    const plan = accept(
      "services:\n  a: {image: x, dns_opt: [ndots:2]}\n  b: {image: x}\nx-denv: {agent: a}\n",
    );
    expect(service(plan, "a").dnsOpt).toEqual(["ndots:2"]);
    expect(service(plan, "b").dnsOpt).toEqual(["timeout:1", "attempts:1"]);
  });

  it("derives image tags for built services and the verifier", () => {
    const plan = accept(
      `
name: My_Proj
services:
  Main.Svc: {build: .}
x-denv:
  verifier: {build: ./grader, command: [python, /tests/grade.py]}
`.replace("name: My_Proj\n", ""),
      { files: { Dockerfile: "", "grader/Dockerfile": "" }, projectName: "My Proj!" },
    );
    expect(plan.name).toBe("myproj");
    expect(service(plan, "Main.Svc").image).toBe("denv-local/myproj-main.svc:latest");
    expect(plan.verifier?.image).toBe("denv-local/myproj-verifier:latest");
  });

  it("snapshots every named volume by default", () => {
    expect(accept("services:\n  a: {image: x}\nvolumes: {v1: , v2: }\n").snapshotVolumes).toEqual([
      "v1",
      "v2",
    ]);
  });
});

describe("interpolation", () => {
  const env = { SET: "value", EMPTY: "" };
  const cases: [string, string][] = [
    ["$SET", "value"],
    ["${SET}", "value"],
    ["${UNSET:-fallback}", "fallback"],
    ["${EMPTY:-fallback}", "fallback"],
    ["${EMPTY-fallback}", ""],
    ["${UNSET-fallback}", "fallback"],
    ["${SET:+alt}", "alt"],
    ["${EMPTY:+alt}", ""],
    ["${EMPTY+alt}", "alt"],
    ["${UNSET:-${SET}}", "value"],
    ["${SET:?never}", "value"],
    ["cost: $$5 and $${SET}", "cost: $5 and ${SET}"],
    ["a${SET}b$SET-c", "avaluebvalue-c"],
  ];
  for (const [input, output] of cases) {
    it(`expands ${input}`, () => {
      const plan = accept(`services:\n  app:\n    image: alpine\n    environment:\n      V: '${input}'\n`, {
        env,
      });
      expect(service(plan, "app").environment.V).toBe(output);
    });
  }

  it("substitutes an empty string for an unset variable, with a note", () => {
    const plan = accept("services:\n  app:\n    image: alpine\n    command: echo ${NOPE}\n");
    expect(service(plan, "app").command).toBe("echo ");
    expect(plan.notes).toEqual([ComposeNotes.variableUnset("NOPE")]);
  });

  it("refuses a required variable that is missing, naming the key", () => {
    expect(
      refusals("services:\n  app:\n    image: ${IMAGE:?set IMAGE}\n    command: [a, '${X?}']\n"),
    ).toEqual([
      svc("app", "image", R.requiredVariable("IMAGE", "set IMAGE")),
      svc("app", "command[1]", "required variable 'X' is missing a value"),
    ]);
    expect(refusals("services:\n  app:\n    image: ${E:?}\n", { env: { E: "" } })[0]).toBe(
      svc("app", "image", R.requiredVariable("E", "")),
    );
  });

  it("refuses an invalid format", () => {
    expect(refusals("services:\n  app:\n    image: alpine\n    command: echo $ 1\n")).toEqual([
      svc("app", "command", R.invalidInterpolation("echo $ 1")),
    ]);
    expect(refusals("services:\n  app:\n    image: 'a${'\n")[0]).toBe(
      svc("app", "image", R.invalidInterpolation("a${")),
    );
  });

  it("interpolates values, not keys, and leaves x-* anchors alone", () => {
    const plan = accept(
      "x-raw: ${NOT_NEEDED:?}\nservices:\n  app:\n    image: alpine\n    labels:\n      ${K}: v\n",
    );
    expect(service(plan, "app").labels).toEqual({ "${K}": "v" });
  });

  it("interpolates project name, volumes and x-denv", () => {
    const plan = accept(
      "name: ${P}\nservices:\n  app:\n    image: a\nx-denv:\n  agent: {workdir: '${W}'}\n",
      {
        env: { P: "proj", W: "/w" },
      },
    );
    expect(plan.name).toBe("proj");
    expect(plan.agent.workdir).toBe("/w");
  });

  it("takes a bare environment variable from the context, and notes one that is not set", () => {
    const plan = accept("services:\n  app:\n    image: a\n    environment: [SET, MISSING, 'EQ=a=b']\n", {
      env,
    });
    expect(service(plan, "app").environment).toEqual({ SET: "value", EQ: "a=b" });
    expect(plan.notes).toEqual([ComposeNotes.environmentUnset("app", "MISSING")]);
    const mapped = accept("services:\n  app:\n    image: a\n    environment: {SET: , N: 1, B: true}\n", {
      env,
    });
    expect(service(mapped, "app").environment).toEqual({ SET: "value", N: "1", B: "true" });
  });

  it("coerces interpolated numbers and booleans", () => {
    const plan = accept("services:\n  app:\n    image: a\n    cpus: ${C}\n    init: ${I}\n", {
      env: { C: "0.25", I: "true" },
    });
    expect(service(plan, "app").resources.cpus).toBe(0.25);
    expect(service(plan, "app").init).toBe(true);
  });
});

describe("anchors and merge keys", () => {
  it("resolves aliases and merges, with local keys winning", () => {
    const plan = accept(`
x-common: &common
  image: alpine
  environment: &env
    A: "1"
    B: "2"
  restart: always
services:
  one:
    <<: *common
    restart: "no"
  two:
    <<: *common
    environment:
      <<: *env
      B: "3"
x-denv: {agent: one}
`);
    expect(service(plan, "one")).toMatchObject({
      image: "alpine",
      restart: "no",
      environment: { A: "1", B: "2" },
    });
    expect(service(plan, "two")).toMatchObject({
      image: "alpine",
      restart: "always",
      environment: { A: "1", B: "3" },
    });
  });

  it("merges a list of maps, the first winning", () => {
    const plan = accept(`
x-a: &a {image: a, user: "1"}
x-b: &b {image: b, hostname: h}
services:
  s:
    <<: [*a, *b]
`);
    expect(service(plan, "s")).toMatchObject({ image: "a", user: "1", hostname: "h" });
  });

  it("interpolates each aliased copy once ($$ stays one $)", () => {
    const plan = accept(`
x-cmd: &cmd [sh, -c, "echo $$HOME"]
services:
  a: {image: x, command: *cmd}
  b: {image: x, command: *cmd}
x-denv: {agent: a}
`);
    expect(service(plan, "a").command).toEqual(["sh", "-c", "echo $HOME"]);
    expect(service(plan, "b").command).toEqual(["sh", "-c", "echo $HOME"]);
  });

  it("refuses an undefined alias and a bad merge source", () => {
    expect(refusals("services:\n  a: *nope\n")).toEqual([
      "compose.yaml is not valid YAML: Unresolved alias (the anchor must be set before the alias): nope",
    ]);
    expect(refusals("services:\n  a:\n    <<: 5\n")).toEqual([
      "compose.yaml is not valid YAML: Merge sources must be maps or map aliases",
    ]);
  });
});

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

describe("depends_on", () => {
  it("orders services dependencies first, stable by file order", () => {
    const plan = accept(`
services:
  main: {image: x, depends_on: [api, cache]}
  api: {image: x, depends_on: {db: {condition: service_healthy}, migrate: {condition: service_completed_successfully}}}
  cache: {image: x}
  migrate: {image: x, depends_on: [db]}
  db: {image: x}
`);
    expect(plan.services.map((s) => s.name)).toEqual(["cache", "db", "migrate", "api", "main"]);
    expect(service(plan, "api").dependsOn).toEqual([
      { service: "db", condition: "service_healthy" },
      { service: "migrate", condition: "service_completed_successfully" },
    ]);
  });

  it("refuses cycles once each, and unknown services", () => {
    expect(
      refusals(`
services:
  main: {image: x, depends_on: [a]}
  a: {image: x, depends_on: [b]}
  b: {image: x, depends_on: [a, ghost]}
  c: {image: x, depends_on: [c]}
`),
    ).toEqual([
      svc("b", "depends_on", R.undefinedService("ghost")),
      svc("a", "depends_on", R.dependencyCycle(["a", "b", "a"])),
      "service 'c': 'depends_on' is refused: dependency cycle c -> c",
    ]);
  });

  it("refuses an unknown condition and ignores optional missing services with a note", () => {
    expect(
      refusals(
        "services:\n  a: {image: x, depends_on: {b: {condition: up}}}\n  b: {image: x}\nx-denv: {agent: a}\n",
      ),
    ).toEqual([
      svc(
        "a",
        "depends_on.b.condition",
        R.expected(
          "one of service_started, service_healthy, service_completed_successfully",
          'the string "up"',
        ),
      ),
    ]);
    const plan = accept("services:\n  a: {image: x, depends_on: {gone: {required: false, restart: true}}}\n");
    expect(plan.notes).toEqual([
      ComposeNotes.dependsOnRestartIgnored("a", "gone"),
      ComposeNotes.optionalDependencyMissing("a", "gone"),
    ]);
  });
});

describe("x-denv", () => {
  const base = "services:\n  main:\n    image: a\n";

  it("refuses unknown keys, bad kinds and egress allow on an rl-environment", () => {
    expect(refusals(`${base}x-denv: {kind: game, egress: allow, colour: blue}\n`)).toEqual([
      top("x-denv.kind", R.kind("game")),
      top("x-denv.egress", R.egressAllowOnRlEnvironment),
      top("x-denv.colour", R.unknownKey),
    ]);
  });

  it("refuses an explicit root agent on an rl-environment, and allows it on a service project", () => {
    expect(refusals(`${base}x-denv: {agent: {user: root}}\n`)).toEqual([
      "'x-denv.agent.user' is refused: the agent is never root on an rl-environment (protection 1); give a non-root user",
    ]);
    expect(accept(`${base}x-denv: {kind: service, agent: {user: "0"}}\n`).agent.user).toBe("0");
  });

  it("accepts security_opt no-new-privileges:true, the one option denv sets itself", () => {
    const yaml = "services:\n  main:\n    image: a\n    security_opt: ['no-new-privileges:true']\n";
    expect(service(accept(yaml), "main").noNewPrivileges).toBe(true);
    expect(service(accept(`${yaml}x-denv: {kind: service}\n`), "main").noNewPrivileges).toBe(true);
    expect(service(accept("services:\n  main:\n    image: a\n"), "main").noNewPrivileges).toBeUndefined();
  });

  it("refuses an agent service that is not defined", () => {
    expect(refusals(`${base}x-denv: {agent: ghost}\n`)).toEqual([
      top("x-denv.agent", R.undefinedService("ghost")),
    ]);
  });

  it("validates snapshot volumes and placement", () => {
    const plan = accept(
      `${base}volumes: {a: , b: }\nx-denv: {snapshot: {volumes: [b]}, placement: {region: eu, gpu: false}}\n`,
    );
    expect(plan.snapshotVolumes).toEqual(["b"]);
    expect(plan.placement).toEqual({ region: "eu", gpu: "false" });
    expect(refusals(`${base}x-denv: {snapshot: {volumes: [ghost]}}\n`)).toEqual([
      top("x-denv.snapshot.volumes", R.undeclaredSnapshotVolume("ghost")),
    ]);
  });

  it("normalizes the verifier", () => {
    const plan = accept(
      `${base}x-denv:
  resources: {memory: 1g}
  verifier:
    image: python:3.12
    command: sh /tests/test.sh
    timeout: 10m
    tests: ./tests/
    submission: [/workspace/out/, /workspace/./log.txt]
    environment: [MODE=strict]
    resources: {cpus: 1}
`,
      { files: { "tests/test.sh": "" } },
    );
    expect(plan.verifier).toEqual({
      image: "python:3.12",
      command: "sh /tests/test.sh",
      timeoutSec: 600,
      tests: "tests",
      submission: ["/workspace/out", "/workspace/log.txt"],
      user: "1001",
      environment: { MODE: "strict" },
      resources: { memoryBytes: 1024 ** 3, cpus: 1, pids: DefaultCaps.pids },
    });
    expect(
      accept(`${base}x-denv: {verifier: {image: v, command: [x], timeout: 30}}\n`).verifier?.timeoutSec,
    ).toBe(30);
  });

  it("refuses a verifier that is root, shares the agent's uid, or reaches outside", () => {
    expect(
      refusals(`${base}x-denv:
  verifier:
    image: v
    command: [x]
    user: root
    tests: ../tests
    submission: [relative, /a/../b, /]
    network: host
`),
    ).toEqual([
      top("x-denv.verifier.user", R.verifierRoot),
      top("x-denv.verifier.tests", R.climbsOut("../tests")),
      top("x-denv.verifier.submission", R.submissionPath("relative")),
      top("x-denv.verifier.submission", R.submissionPath("/a/../b")),
      top("x-denv.verifier.submission", R.submissionPath("/")),
      top("x-denv.verifier.network", R.unknownKey),
    ]);
    expect(refusals(`${base}x-denv: {verifier: {image: v, command: [x], user: "1000"}}\n`)).toEqual([
      top("x-denv.verifier.user", R.verifierSameUser("1000")),
    ]);
    expect(refusals(`${base}x-denv: {verifier: {tests: tests}}\n`)).toEqual([
      top("x-denv.verifier.tests", R.notFound("tests")),
      ComposeMessages.topMissing("x-denv.verifier.image", "give 'image' or 'build'"),
      "'x-denv.verifier.command' is missing: the verifier needs a command, e.g. [sh, /tests/test.sh]",
    ]);
  });
});

describe("networks", () => {
  it("maps networks onto one and notes when services were on different ones", () => {
    const plan = accept(`
services:
  main: {image: x, networks: {front: {aliases: [web]}, back: }}
  db: {image: x, networks: [back]}
networks:
  front:
  back: {driver: bridge, internal: true}
`);
    expect(service(plan, "main").aliases).toEqual(["main", "web"]);
    expect(plan.notes).toEqual([ComposeNotes.networksMerged(["front", "back"])]);
  });

  it("refuses address options", () => {
    expect(
      refusals("services:\n  main: {image: x, networks: {n: {ipv4_address: 10.0.0.2}}}\nnetworks: {n: }\n"),
    ).toEqual([svc("main", "networks.n.ipv4_address", R.networkOption("ipv4_address"))]);
  });
});

describe("units and names", () => {
  it("reads compose durations and sizes", async () => {
    const { parseBytes, parseDuration } = await import("./units.js");
    expect(parseDuration("1m30s")).toBe(90_000);
    expect(parseDuration("1h2m3.5s")).toBe(3_723_500);
    expect(parseDuration("500ms")).toBe(500);
    expect(parseDuration("250us")).toBe(0);
    expect(parseDuration(0)).toBe(0);
    expect(parseDuration("10")).toBeUndefined();
    expect(parseDuration(10)).toBeUndefined();
    expect(parseDuration("1d")).toBeUndefined();
    expect(parseBytes("512m")).toBe(512 * 1024 ** 2);
    expect(parseBytes("1g")).toBe(1024 ** 3);
    expect(parseBytes("1.5GiB")).toBe(1.5 * 1024 ** 3);
    expect(parseBytes("2kb")).toBe(2048);
    expect(parseBytes("1024")).toBe(1024);
    expect(parseBytes(4096)).toBe(4096);
    expect(parseBytes("lots")).toBeUndefined();
  });

  it("keeps paths inside the project", async () => {
    const { projectPath } = await import("./project-path.js");
    expect(projectPath("./a/b/../c/")).toEqual({ ok: true, path: "a/c" });
    expect(projectPath(".")).toEqual({ ok: true, path: "." });
    expect(projectPath("../Dockerfile", "app")).toEqual({ ok: true, path: "Dockerfile" });
    expect(projectPath("a/../../b")).toEqual({ ok: false, reason: R.climbsOut("a/../../b") });
    expect(projectPath("..\\..\\etc")).toEqual({ ok: false, reason: R.climbsOut("..\\..\\etc") });
    expect(projectPath("~/x")).toEqual({ ok: false, reason: R.absolutePath("~/x") });
  });

  it("derives unique, valid image tags", () => {
    const plan = accept(
      "services:\n  main: {build: .}\n  Main: {build: .}\n  'a__b--c..d': {build: .}\n  taken: {image: 'denv-local/demo-x:latest'}\n  x: {build: .}\n",
      { files: { Dockerfile: "" } },
    );
    expect(plan.services.map((s) => s.image)).toEqual([
      "denv-local/demo-main:latest",
      "denv-local/demo-main-2:latest",
      "denv-local/demo-a__b--c-d:latest",
      "denv-local/demo-x:latest",
      "denv-local/demo-x-2:latest",
    ]);
  });

  it("notes an unset verifier variable", () => {
    const plan = accept(
      "services:\n  main: {image: a}\nx-denv: {verifier: {image: v, command: [x], environment: [KEY]}}\n",
    );
    expect(plan.notes).toEqual([ComposeNotes.verifierEnvironmentUnset("KEY")]);
  });
});
