import { describe, expect, it } from "vitest";
import { ComposeMessages, ComposeReasons, Refusal, RefusedServiceKeys } from "../messages.js";
import { accept, type ComposeFixture, refusals, service } from "./compose-fixture.js";

const svc = Refusal.serviceKey;
const R = ComposeReasons;

describe("refused service keys", () => {
  const one = (key: string, reason: string, extra = "") => ({
    yaml: `services:\n  app:\n    image: alpine\n${extra}`,
    expected: [svc("app", key, reason)],
  });
  const build = (value: string, key: string, reason: string) => ({
    yaml: `services:\n  app:\n    build: ${value}\n`,
    expected: [svc("app", key, reason)],
  });
  const cases: { name: string; yaml: string; fixture?: ComposeFixture; expected: string[] }[] = [
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
      ...build("../elsewhere", "build.context", R.climbsOut("../elsewhere")),
    },
    {
      name: "absolute build context",
      ...build("{context: /srv/app}", "build.context", R.absolutePath("/srv/app")),
    },
    { name: "missing build context", ...build("./nope", "build.context", R.notFound("./nope")) },
    {
      name: "remote build context",
      ...build("https://github.com/o/r.git", "build.context", R.remoteContext("https://github.com/o/r.git")),
    },
    {
      name: "build network",
      fixture: { files: { Dockerfile: "" } },
      ...build("{context: ., network: host}", "build.network", R.buildHostAccess("network")),
    },
  ];
  for (const c of cases) {
    it(c.name, () => expect(refusals(c.yaml, c.fixture)).toEqual(c.expected));
  }

  it("accepts a refused key set to its default", () => {
    const plan = accept(
      "services:\n  app:\n    image: a\n    privileged: false\n    cap_add: []\n    tty: false\n",
    );
    expect(plan.services).toHaveLength(1);
  });
});

describe("accepted service keys", () => {
  it("accepts security_opt no-new-privileges:true, the one option denv sets itself", () => {
    const yaml = "services:\n  main:\n    image: a\n    security_opt: ['no-new-privileges:true']\n";
    expect(service(accept(yaml), "main").noNewPrivileges).toBe(true);
    expect(service(accept(`${yaml}x-denv: {kind: service}\n`), "main").noNewPrivileges).toBe(true);
    expect(service(accept("services:\n  main:\n    image: a\n"), "main").noNewPrivileges).toBeUndefined();
  });

  it("gives rl-environment services a fail-fast resolver unless dns_opt is set", () => {
    const plan = accept(
      "services:\n  a: {image: x, dns_opt: [ndots:2]}\n  b: {image: x}\nx-denv: {agent: a}\n",
    );
    expect(service(plan, "a").dnsOpt).toEqual(["ndots:2"]);
    expect(service(plan, "b").dnsOpt).toEqual(["timeout:1", "attempts:1"]);
  });
});
