import { createHash } from 'node:crypto';
import { Worker, type ResourceLimits } from 'node:worker_threads';
import { BatonError } from '../../errors.ts';
import { OutputInvalidError, TransientError } from '../../sdk/errors.ts';
import {
  SCHEMA_GUARD_BUDGET, SCHEMA_LIMITS, checkSchemaLimits, type SchemaGuardBudget, type SchemaLimits,
} from './schema-limits.ts';
import type { ThreadJob, ThreadReady, ThreadReply, ThreadRequest, ThreadSettings } from './schema-thread.ts';

/**
 * Compiles and validates tenants' output schemas without ever blocking the caller's event
 * loop (invariant 12: no tenant stalls another). A schema is first held against the static
 * limits (schema-limits.ts); then ajv runs in a worker thread, one request at a time, each
 * with a time budget, the thread with a heap limit. A request that overruns either is
 * answered as the tenant's failure, and the thread is terminated and replaced for the next.
 *
 *   await guard.check(schema)                  at submit: resolves, or throws 400 OUTPUT_SCHEMA_INVALID
 *   await guard.validate(schema, value, json?) at a goal finish: the value, or throws OutputInvalidError
 *
 * Requests name the scope they are for, and the thread takes them from the scopes in turn
 * (round robin): a tenant that submits schema after schema waits behind its own requests,
 * while another tenant's waits for at most one request of each busy scope. A request the API
 * makes for a tenant (a submit's check, a resume's validation) is `bounded`: a scope may have
 * at most `maxQueuedPerScope` requests waiting in one process, more is 429 SCHEMA_CHECKS_BUSY,
 * so a flood costs the flooding tenant, bounded in memory, and writes nothing. Such a request
 * also carries its HTTP request's `signal`: when the client goes away, the request leaves the
 * queue before it runs, or, running, is stopped (its thread replaced), and answers
 * CLIENT_CLOSED, which nobody reads. Work nobody waits for is never done.
 *
 * One guard per process, closed by its owner (close() terminates the thread). Code that is
 * not handed one uses processSchemaGuard().
 */
export interface SchemaGuardOptions {
  limits?: Partial<SchemaLimits>;
  budget?: Partial<SchemaGuardBudget>;
  /**
   * Bounded requests of one scope waiting in this process at most (SCHEMA_CHECKS_PER_SCOPE,
   * default 32: a burst of submits with schemas fits; 32 × 64 KiB of schema text at most).
   */
  maxQueuedPerScope?: number;
  /** Told how each request that reached the queue ended (the process's metrics count them). */
  events?: SchemaGuardEvents;
}

/**
 * How a request ended: the thread answered (`passed`, or `refused`: the schema or the value
 * failed), or it was cut: over its time budget or memory limit, the thread crashed, the
 * client went away (`gone`: dropped from the queue, or stopped running), the guard closed or
 * its thread could not start.
 */
export type SchemaCheckOutcome = 'passed' | 'refused' | Cut['reason'];

export interface SchemaGuardEvents {
  ended?(op: ThreadJob['op'], outcome: SchemaCheckOutcome): void;
}

/** How a request is made: for whom, whether it counts against its scope's cap, and until when it is wanted. */
export interface GuardRequest {
  /** Whose turn in the queue ('' = the process's own). */
  scope?: string;
  /** Refused with 429 SCHEMA_CHECKS_BUSY when the scope has maxQueuedPerScope requests waiting already (the API's are). */
  bounded?: boolean;
  /** Aborts when nobody waits for the answer any more (the HTTP client went away): the request is dropped. */
  signal?: AbortSignal;
}

/** The guard was closed (its process is shutting down): not the schema's fault, so a run retries. */
export class SchemaGuardClosedError extends TransientError {
  constructor() {
    super('the output schema guard is closed', 'SCHEMA_GUARD_CLOSED');
    this.name = 'SchemaGuardClosedError';
  }
}

/** The thread could not start (a broken install): the guard's fault, never the schema's. */
export class SchemaGuardUnavailableError extends TransientError {
  constructor(cause: unknown) {
    super(`the output schema guard could not start its thread: ${(cause as Error)?.message ?? cause}`, 'SCHEMA_GUARD_UNAVAILABLE', { cause });
    this.name = 'SchemaGuardUnavailableError';
  }
}

/** Why a request got no answer from the thread. */
type Cut = { id: number; ok: false; reason: 'budget' | 'memory' | 'crash' | 'closed' | 'unavailable' | 'gone'; error?: unknown };
type Outcome = ThreadReply | Cut;

interface Job { req: ThreadRequest; budgetMs: number; scope: string; done(out: Outcome): void }
interface Thread { worker: Worker; ready: boolean }

/** Schemas that passed check() are remembered by hash, so the second check of a submit (route, then store) is free. */
const KNOWN_GOOD_MAX = 1_000;

export class SchemaGuard {
  readonly limits: Readonly<SchemaLimits>;
  readonly budget: Readonly<SchemaGuardBudget>;
  private thread: Thread | undefined;
  private current: { job: Job; timer: NodeJS.Timeout } | undefined;
  /** Waiting requests by scope; a Map keeps insertion order, so serving a scope and re-adding it rotates. */
  private readonly queues = new Map<string, Job[]>();
  private readonly maxQueuedPerScope: number;
  private readonly knownGood = new Set<string>();
  private readonly events: SchemaGuardEvents;
  private nextId = 1;
  private closing: Promise<void> | undefined;

  constructor(o: SchemaGuardOptions = {}) {
    this.limits = Object.freeze({ ...SCHEMA_LIMITS, ...o.limits });
    this.budget = Object.freeze({ ...SCHEMA_GUARD_BUDGET, ...o.budget });
    this.maxQueuedPerScope = o.maxQueuedPerScope ?? 32;
    this.events = o.events ?? {};
  }

  /**
   * Refuses a schema over a limit, one ajv cannot compile, or one whose compile overruns the
   * budget: 400 OUTPUT_SCHEMA_INVALID (the limit or reason in `details`).
   */
  async check(schema: object, { scope = '', bounded = false, signal }: GuardRequest = {}): Promise<void> {
    const limited = checkSchemaLimits(schema, this.limits);
    if (!limited.ok) throw schemaInvalid(limited.violation.message, limited.violation.at);
    const key = hashOf(limited.text);
    if (this.knownGood.has(key)) return;
    if (bounded) this.admit(scope, 'body.outputSchema', this.budget.compileMs);
    const out = await this.run({ op: 'check', key, schema: limited.text, patterns: limited.patterns }, this.budget.compileMs, scope, signal);
    if (out.ok) {
      if (this.knownGood.size >= KNOWN_GOOD_MAX) this.knownGood.delete(this.knownGood.values().next().value!);
      this.knownGood.add(key);
      return;
    }
    if (out.reason === 'schema') throw schemaInvalid(out.message);
    if (out.reason === 'value') throw new Error('the schema thread answered a check with a value failure');
    throw this.cutError(out, 'compiling the schema', this.budget.compileMs, schemaInvalid);
  }

  /**
   * Validates `value` (the agent's payload, or its answer parsed) against `schema`. Pass
   * `json` when the caller has the value's JSON text already (the answer): it is sent as is,
   * which also spares serializing a value too deep for JSON.stringify. Resolves with `value`;
   * every failure of the value or the schema, an overrun budget included, is an
   * OutputInvalidError (permanent: the same answer would fail the same way again). `scope`
   * is the run's (its turn in the queue; a worker's own concurrency bounds how many wait).
   * `label` names the schema in messages: a run's `outputSchema`, or a wait's schema.
   */
  async validate(
    schema: object, value: unknown, json?: string, scope = '', { bounded = false, signal, label = 'outputSchema' }: GuardRequest & { label?: string } = {},
  ): Promise<unknown> {
    const limited = checkSchemaLimits(schema, this.limits);
    if (!limited.ok) throw outputInvalid(`${label} is over a limit: ${limited.violation.message}`);
    let text = json;
    if (text === undefined) {
      try {
        text = JSON.stringify(value);
      } catch (err) {
        throw outputInvalid(`the payload cannot be serialized as JSON: ${(err as Error).message}`);
      }
      if (text === undefined) throw outputInvalid('the payload is not a JSON value');
    }
    if (bounded) this.admit(scope, 'body.value', this.budget.validateMs);
    const out = await this.run(
      { op: 'validate', key: hashOf(limited.text), schema: limited.text, patterns: limited.patterns, value: text },
      this.budget.validateMs,
      scope,
      signal,
    );
    if (out.ok) return value;
    if (out.reason === 'value') throw new OutputInvalidError(out.problems);
    if (out.reason === 'schema') throw outputInvalid(`${label} cannot be compiled: ${out.message}`);
    throw this.cutError(out, 'validating the answer', this.budget.validateMs, outputInvalid);
  }

  /** Requests of `scope` waiting for the thread (the running one not counted). */
  queued(scope: string): number {
    return this.queues.get(scope)?.length ?? 0;
  }

  /** A bounded request of a scope whose queue is full: 429 SCHEMA_CHECKS_BUSY, come back after one budget. */
  private admit(scope: string, path: string, budgetMs: number): void {
    if (this.queued(scope) < this.maxQueuedPerScope) return;
    throw new BatonError('SCHEMA_CHECKS_BUSY', undefined, [
      { path, message: `${this.maxQueuedPerScope} schema checks of this scope are already waiting in this process (SCHEMA_CHECKS_PER_SCOPE)` },
    ], { retryAfterMs: budgetMs });
  }

  /** Terminates the thread; pending and later requests fail with SchemaGuardClosedError. Idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      const jobs = this.takeAll();
      if (this.current) {
        clearTimeout(this.current.timer);
        jobs.unshift(this.current.job);
        this.current = undefined;
      }
      for (const job of jobs) job.done({ id: job.req.id, ok: false, reason: 'closed' });
      const thread = this.thread;
      this.thread = undefined;
      if (thread) await thread.worker.terminate();
    })();
    return this.closing;
  }

  /**
   * A request the thread did not answer. Closed or unavailable: the guard's state, not the
   * schema's fault (transient). Over budget, over memory or a crash: the request caused it,
   * so it is the schema's (or answer's) failure, in the caller's own error type.
   */
  private cutError(out: Cut, what: string, budgetMs: number, asFailure: (message: string) => Error): Error {
    switch (out.reason) {
      case 'closed': return new SchemaGuardClosedError();
      case 'unavailable': return new SchemaGuardUnavailableError(out.error);
      case 'gone': return new BatonError('CLIENT_CLOSED');
      case 'budget': return asFailure(`${what} took longer than its budget of ${budgetMs} ms and was stopped`);
      case 'memory': return asFailure(`${what} needed more than the memory limit of ${this.budget.heapMb} MB and was stopped`);
      case 'crash': return asFailure(`${what} crashed the schema thread`);
    }
  }

  private run(job: ThreadJob, budgetMs: number, scope: string, signal?: AbortSignal): Promise<Outcome> {
    if (this.closing) return Promise.resolve({ id: 0, ok: false, reason: 'closed' });
    if (signal?.aborted) return Promise.resolve({ id: 0, ok: false, reason: 'gone' });
    return new Promise<Outcome>((resolve) => {
      const gone = () => this.drop(entry);
      const done = (out: Outcome) => {
        signal?.removeEventListener('abort', gone);
        this.events.ended?.(job.op, out.ok ? 'passed' : out.reason === 'schema' || out.reason === 'value' ? 'refused' : out.reason);
        resolve(out);
      };
      const entry: Job = { req: { ...job, id: this.nextId++ }, budgetMs, scope, done };
      signal?.addEventListener('abort', gone, { once: true });
      const queue = this.queues.get(scope);
      if (queue) queue.push(entry);
      else this.queues.set(scope, [entry]);
      this.pump();
    });
  }

  /**
   * Nobody waits for `job` any more: out of its queue if it has not started; stopped with its
   * thread if it is running (a compile or validation can take the whole budget, and the next
   * request, of this scope or another, should not wait for an answer nobody reads).
   */
  private drop(job: Job): void {
    if (this.current?.job === job) {
      if (this.thread) return this.discard(this.thread, 'gone');
      return;
    }
    const queue = this.queues.get(job.scope);
    const at = queue?.indexOf(job) ?? -1;
    if (at < 0) return;
    queue!.splice(at, 1);
    if (queue!.length === 0) this.queues.delete(job.scope);
    job.done({ id: job.req.id, ok: false, reason: 'gone' });
    this.holdProcess();
  }

  /** The next request in turn: the first waiting scope's oldest; that scope goes to the back. */
  private next(): Job | undefined {
    const first = this.queues.entries().next();
    if (first.done) return undefined;
    const [scope, queue] = first.value;
    const job = queue.shift()!;
    this.queues.delete(scope);
    if (queue.length) this.queues.set(scope, queue);
    return job;
  }

  private takeAll(): Job[] {
    const jobs = [...this.queues.values()].flat();
    this.queues.clear();
    return jobs;
  }

  /** Starts the next request when the thread is ready and idle; the budget counts from here. */
  private pump(): void {
    if (this.closing || this.current || this.queues.size === 0) return this.holdProcess();
    const thread = (this.thread ??= this.spawn());
    if (!thread.ready) return this.holdProcess();
    const job = this.next()!;
    const timer = setTimeout(() => this.discard(thread, 'budget'), job.budgetMs);
    this.current = { job, timer };
    this.holdProcess();
    thread.worker.postMessage(job.req);
  }

  /**
   * The thread keeps the process alive only while it has work: an idle guard that nobody
   * closed (the process-wide default) must not keep a finished process running.
   */
  private holdProcess(): void {
    const busy = this.current !== undefined || this.queues.size > 0;
    if (!this.thread) return;
    if (busy) this.thread.worker.ref();
    else this.thread.worker.unref();
  }

  private spawn(): Thread {
    const thread: Thread = {
      worker: startThread(
        { cacheEntries: this.budget.cacheEntries, maxValueDepth: this.limits.maxValueDepth },
        // The young generation is kept small too: V8 sizes it from the machine otherwise.
        { maxOldGenerationSizeMb: this.budget.heapMb, maxYoungGenerationSizeMb: 16 },
      ),
      ready: false,
    };
    thread.worker.on('message', (m: ThreadReply | ThreadReady) => {
      if (this.thread !== thread) return;
      if ('ready' in m) {
        thread.ready = true;
        return this.pump();
      }
      const cur = this.current;
      if (!cur || cur.job.req.id !== m.id) return;
      clearTimeout(cur.timer);
      this.current = undefined;
      cur.job.done(m);
      this.pump();
    });
    // V8 out of memory under resourceLimits, or anything else that ends the thread.
    thread.worker.on('error', (err: Error & { code?: string }) => {
      if (!thread.ready) return this.unavailable(thread, err);
      this.discard(thread, err.code === 'ERR_WORKER_OUT_OF_MEMORY' ? 'memory' : 'crash');
    });
    thread.worker.on('exit', (code) => {
      if (!thread.ready) return this.unavailable(thread, new Error(`the thread exited with code ${code}`));
      this.discard(thread, 'crash');
    });
    return thread;
  }

  /**
   * The thread is unusable (over budget, out of memory, crashed) or runs what nobody waits for
   * (gone): terminate it, answer the request it was running with the reason, and give the
   * queue to a fresh thread.
   */
  private discard(thread: Thread, reason: 'budget' | 'memory' | 'crash' | 'gone'): void {
    if (this.thread !== thread) return;
    this.thread = undefined;
    void thread.worker.terminate();
    const cur = this.current;
    this.current = undefined;
    if (cur) {
      clearTimeout(cur.timer);
      cur.job.done({ id: cur.job.req.id, ok: false, reason });
    }
    this.pump();
  }

  /**
   * The thread died before it was ready: no request ran, so none is at fault. The queue is
   * failed instead of handed to a new thread, which would die the same way, over and over;
   * the next request tries again.
   */
  private unavailable(thread: Thread, error: unknown): void {
    if (this.thread !== thread) return;
    this.thread = undefined;
    void thread.worker.terminate();
    for (const job of this.takeAll()) job.done({ id: job.req.id, ok: false, reason: 'unavailable', error });
  }
}

function hashOf(text: string): string {
  return createHash('sha256').update(text).digest('base64url');
}

function schemaInvalid(message: string, at = ''): BatonError {
  return new BatonError('OUTPUT_SCHEMA_INVALID', undefined, [
    { path: at ? `body.outputSchema.${at}` : 'body.outputSchema', message },
  ]);
}

function outputInvalid(message: string): OutputInvalidError {
  return new OutputInvalidError([{ path: '/', message }]);
}

/**
 * The thread runs schema-thread next to this module: schema-thread.js once compiled to
 * dist/; from the TypeScript sources (tsx, vitest), schema-thread-tsx.mjs, which registers
 * tsx in the thread and then imports schema-thread.ts (Node 20 gives a thread neither the
 * parent's loader hooks nor a working `--import tsx`).
 */
function startThread(settings: ThreadSettings, resourceLimits: ResourceLimits): Worker {
  const fromSources = new URL(import.meta.url).pathname.endsWith('.ts');
  const file = new URL(fromSources ? './schema-thread-tsx.mjs' : './schema-thread.js', import.meta.url);
  // execArgv []: the host's flags (a test runner's, --inspect) are not the thread's.
  return new Worker(file, { workerData: settings, resourceLimits, execArgv: [] });
}

let processGuard: SchemaGuard | undefined;

/**
 * This process's guard, started on first use. Its thread holds the process open only while
 * it works, so a process that never closes it still exits. A composition root that owns a
 * guard passes it down instead, and closes it after the API and worker it serves.
 */
export function processSchemaGuard(): SchemaGuard {
  return (processGuard ??= new SchemaGuard());
}
