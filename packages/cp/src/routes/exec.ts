import {
  DenvError,
  ExecRequest,
  ExecResponse,
  ExecStreamClientFrame,
  type ExecStreamServerFrame,
} from "@denv/spec";
import type { WebSocket } from "ws";
import { toErrorResponse } from "../http/errors.js";
import { EnvParams, type Route, route } from "../http/route.js";
import { callFailure, type StreamCall } from "../hub/hub.js";
import type { Principal } from "../services/access.js";
import type { Services } from "../services/container.js";
import type { StreamTap } from "../services/episode-recorder.js";
import { sendAndDrain } from "./socket-io.js";

export function execRoutes(s: Services): Route[] {
  return [
    route({
      kind: "json",
      method: "POST",
      path: "/v1/environments/:project/:env/exec",
      summary: "Run a command and wait for its result (stdin and output as base64/UTF-8 in JSON)",
      tag: "exec",
      auth: "token",
      params: EnvParams,
      body: ExecRequest,
      responses: [{ status: 200, description: "The command's result", schema: ExecResponse }],
      handler: async ({ principal, params, body }) => ({
        status: 200,
        body: await s.episodes.exec(principal, params.project, params.env, body, () =>
          s.environments.exec(principal, params.project, params.env, body),
        ),
      }),
    }),
    route({
      kind: "websocket",
      method: "GET",
      path: "/v1/environments/:project/:env/exec/stream",
      summary:
        "Run a command with stdin and output streamed over a WebSocket (text frames, see ExecStream*Frame)",
      tag: "exec",
      auth: "token",
      params: EnvParams,
      prepare: async ({ principal, params }) => {
        await s.environments.target(principal, params.project, params.env);
      },
      responses: [{ status: 101, description: "Upgraded; first client frame {type:start, exec}" }],
      handler: (socket, { principal, params }) => {
        new ExecSession(s, principal, params.project, params.env, socket).run();
      },
    }),
  ];
}

/**
 * One exec stream: client frames feed stdin under the host's credit (the client socket is
 * paused while a write waits), host output is forwarded as the client drains it, and the exit
 * frame closes the socket.
 */
class ExecSession {
  private call: StreamCall<"env.exec"> | undefined;
  private tap: StreamTap | undefined;
  private chain: Promise<void> = Promise.resolve();

  constructor(
    private readonly s: Services,
    private readonly principal: Principal,
    private readonly project: string,
    private readonly env: string,
    private readonly socket: WebSocket,
  ) {}

  run(): void {
    this.socket.on("message", (data) => {
      // Handled in order; while one waits for credit the socket is paused so frames do not pile up.
      this.socket.pause();
      this.chain = this.chain
        .then(() => this.onFrame(data.toString()))
        .catch((err: unknown) => this.fail(err))
        .finally(() => this.socket.resume());
    });
    this.socket.on("close", () => {
      if (this.call) {
        this.s.hub.cancel(this.call.commandId);
        this.call.close();
      }
    });
  }

  private async onFrame(text: string): Promise<void> {
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new DenvError("invalid_request", "exec stream frames are JSON text");
    }
    const frame = ExecStreamClientFrame.parse(json);
    if (frame.type === "start") {
      if (this.call) throw new DenvError("invalid_request", "the exec already started");
      // The episode's step is numbered before the command starts.
      this.tap = await this.s.episodes.stream(this.principal, this.project, this.env, frame.exec);
      try {
        this.call = await this.s.environments.execStream(this.principal, this.project, this.env, frame.exec);
      } catch (err) {
        await this.tap?.fail(err);
        throw err;
      }
      void this.forward(this.call, this.tap);
      return;
    }
    if (!this.call) throw new DenvError("invalid_request", "send {type:'start', exec} first");
    if (frame.type === "stdin") {
      const data = Buffer.from(frame.data, "base64");
      this.tap?.stdin(data);
      await this.call.outbound.write("stdin", data);
    } else this.call.outbound.end();
  }

  private async forward(call: StreamCall<"env.exec">, tap: StreamTap | undefined): Promise<void> {
    try {
      for await (const chunk of call.inbound) {
        const c = chunk as { channel: string; data: Buffer };
        const type = c.channel === "stderr" ? "stderr" : "stdout";
        tap?.output(type, c.data);
        await this.send({ type, data: c.data.toString("base64") });
      }
      const result = await call.result;
      // Checked against what the stream carried, and recorded in the episode's log.
      await tap?.finish(result);
      // The API's ExecResponse: the host's stream summary stays between the host and the cp.
      await this.send({ type: "exit", result: ExecResponse.parse({ ...result, stdout: "", stderr: "" }) });
      this.socket.close(1000, "exit");
    } catch (err) {
      const failure = await callFailure(call, err);
      await tap?.fail(failure);
      this.fail(failure);
    } finally {
      call.close();
    }
  }

  private send(frame: ExecStreamServerFrame): Promise<void> {
    return sendAndDrain(this.socket, JSON.stringify(frame));
  }

  private fail(err: unknown): void {
    if (this.socket.readyState !== this.socket.OPEN) return;
    const { body } = toErrorResponse(err);
    this.socket.send(JSON.stringify({ type: "error", error: body.error } satisfies ExecStreamServerFrame));
    this.socket.close(1011, body.error.message.slice(0, 120));
  }
}
