import { Refusal } from "../messages.js";

/**
 * What validation found: refusals (the file is refused when there is at least one) and notes
 * (the file is accepted, but the user should know). Validation collects every refusal
 * instead of stopping at the first.
 */
export class Findings {
  readonly refusals: string[] = [];
  readonly notes: string[] = [];
  /** Keys whose value could not be interpolated: later refusals on them would only repeat it. */
  private readonly poisoned: string[] = [];

  refuse(line: string): void {
    if (!this.refusals.includes(line)) this.refusals.push(line);
  }

  /** Refuse a service key. `key` is a compose path inside the service, e.g. `deploy.replicas`. */
  service(service: string, key: string, reason: string): void {
    if (this.isPoisoned(`services.${service}.${key}`)) return;
    this.refuse(Refusal.serviceKey(service, key, reason));
  }

  /** Refuse a key outside the services, e.g. `x-denv.egress` or `volumes.data.external`. */
  top(key: string, reason: string): void {
    if (this.isPoisoned(key)) return;
    this.refuse(Refusal.topKey(key, reason));
  }

  /**
   * Records a refusal of a value that could not be interpolated (the path is dotted, from the
   * top: `services.app.command[1]`); later refusals on the same branch are left out.
   */
  uninterpolated(path: string, line: string): void {
    this.refuse(line);
    this.poisoned.push(path.replace(/\[\d+\]/g, ""));
  }

  private isPoisoned(key: string): boolean {
    const k = key.replace(/\[\d+\]/g, "");
    return this.poisoned.some((p) => k === p || k.startsWith(`${p}.`) || p.startsWith(`${k}.`));
  }

  note(line: string): void {
    if (!this.notes.includes(line)) this.notes.push(line);
  }
}

/** Where a refusal goes: a service's key or a top-level key, decided by the caller. */
export type Refuse = (key: string, reason: string) => void;
