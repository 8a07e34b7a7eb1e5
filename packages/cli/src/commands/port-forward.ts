import type { CommandSpec } from "../command.js";
import { CliError } from "../exit-codes.js";

export const portForward: CommandSpec = {
  name: "port-forward",
  summary: "forward a local port to a service port of an environment, until Ctrl-C",
  args: "PROJECT/ENV SERVICE:PORT [LOCAL_PORT]",
  description: `
Listens on 127.0.0.1:LOCAL_PORT (default: a free port) and tunnels each connection to PORT of
SERVICE inside the environment, each through its own WebSocket. Prints the local address
(HOST:PORT) on stdout once it listens, then runs until Ctrl-C (SIGINT) or SIGTERM.
--json prints {address, host, port, environment, service, remote_port} instead.`,
  remote: true,
  async run(ctx) {
    const [ref = "", target = "", local] = ctx.args(2, 3, "PROJECT/ENV and SERVICE:PORT");
    const env = ctx.environment(ref);
    const match = /^([^:]+):(\d{1,5})$/.exec(target);
    if (match === null || Number(match[2]) < 1 || Number(match[2]) > 65535) {
      throw ctx.usage(`'${target}' is not SERVICE:PORT (e.g. db:5432)`);
    }
    if (local !== undefined && (!/^\d{1,5}$/.test(local) || Number(local) > 65535)) {
      throw ctx.usage(`'${local}' is not a port number`);
    }
    const service = match[1] ?? "";
    const client = ctx.client();
    // Check once up front, so that a typo fails now rather than at the first connection.
    const environment = await client.getEnvironment(env);
    if (!environment.services.some((s) => s.name === service)) {
      const names = environment.services.map((s) => s.name).join(", ");
      throw new CliError("not_found", `environment ${env} has no service '${service}' (it has ${names})`);
    }
    const forward = await client.portForward(env, target, Number(local ?? 0), {
      onError: (err) =>
        ctx.progress(`denv port-forward: a connection could not be forwarded: ${err.message}`),
    });
    const address = `${forward.host}:${forward.port}`;
    ctx.print(
      {
        address,
        host: forward.host,
        port: forward.port,
        environment: env,
        service,
        remote_port: Number(match[2]),
      },
      address,
    );
    ctx.progress(`forwarding ${address} -> ${target} in ${env}; Ctrl-C stops`);
    await ctx.io.untilSignal();
    await forward.close();
    return 0;
  },
};
