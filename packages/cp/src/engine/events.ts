import { EventEmitter } from "node:events";
import type { DeploymentRecord, LogRecord } from "../store/records.js";

export interface DeploymentListener {
  entry(e: LogRecord): void;
  done(d: DeploymentRecord): void;
}

/** Live phase changes and log lines of running deployments, for SSE followers. */
export class DeploymentEvents {
  private emitter = new EventEmitter();

  constructor() {
    // Every SSE follower of a deployment adds a listener; many followers are normal.
    this.emitter.setMaxListeners(0);
  }

  subscribe(deploymentId: string, l: DeploymentListener): () => void {
    const onEntry = (e: LogRecord) => l.entry(e);
    const onDone = (d: DeploymentRecord) => l.done(d);
    this.emitter.on(`entry:${deploymentId}`, onEntry);
    this.emitter.on(`done:${deploymentId}`, onDone);
    return () => {
      this.emitter.off(`entry:${deploymentId}`, onEntry);
      this.emitter.off(`done:${deploymentId}`, onDone);
    };
  }

  entry(e: LogRecord): void {
    this.emitter.emit(`entry:${e.deploymentId}`, e);
  }

  done(d: DeploymentRecord): void {
    this.emitter.emit(`done:${d.id}`, d);
  }
}
