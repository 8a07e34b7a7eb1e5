import { describe, expect, it } from "vitest";
import { ComposeMessages, ComposeNotes, ComposeReasons, DefaultCaps, Refusal } from "../messages.js";
import type { Plan } from "../plan.js";
import { accept, type ComposeFixture, refusals, service } from "./compose-fixture.js";

const top = Refusal.topKey;
const R = ComposeReasons;

describe("accepted files", () => {
  const cases: { name: string; yaml: string; fixture?: ComposeFixture; check: (plan: Plan) => void }[] = [
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
  const cases: { name: string; yaml: string; fixture?: ComposeFixture; expected: string[] }[] = [
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
