import { randomBytes } from 'node:crypto';
import type { Config } from '../../config/index.ts';
import {
  PUBLIC_RUN_STATUSES, TERMINAL_STATUSES, type BulkRequest, type PublicRunStatus,
  type OperationKind, type OperationList, type OperationListOptions, type OperationStatus, type OperationView, type RunFilter,
} from '../../contract/index.ts';
import { BatonError } from '../../errors.ts';
import type { Keys } from '../../keys.ts';
import type { Logger } from '../../logger.ts';
import { entriesAfter, fitting, measure, parsePositionCursor, positionCursor, readHashes } from '../../redis/listing-page.ts';
import { PollLoop } from '../../redis/poll-loop.ts';
import { redisNowMs, type Redis } from '../../redis/redis.ts';
import type { RunStatus, ShownRun } from '../../transitions/record.ts';
import { planRerun, rerunSubmit } from './reruns.ts';
import { listRuns } from '../run-listing.ts';
import type { RunStore } from '../store.ts';
import type { Submissions } from '../submissions.ts';
import type { BulkGateway } from '../../transitions/operations-gateway.ts';

/**
 * Bulk operations: cancel or re-run every run of a scope a filter matches, in the background.
 *
 * An operation is a hash under the scope's hash tag (`operation:<id>`): its kind, filter, status,
 * counters (matched, done, failed), the listing cursor it has reached, and while a process
 * works on a batch, that process's lease. `operations` lists a scope's operations by creation,
 * `operations:active` its running ones; the global `operation-scopes` set names the scopes with
 * one, so an idle poll is one SSCAN.
 *
 * Every process runs a BulkWorker, and none leads. A batch is taken in two steps:
 * 1. claim (transitions/bulk-claim.lua): the scope's oldest running operation, if no live lease holds
 *    it and its pace allows, gets this process's lease token, and the claim answers its cursor.
 * 2. act on the next runs of the listing from that cursor (the listing's own indexes: status,
 *    agent, runtime or session, newest first), one at a time through the normal transition (a
 *    cancel) or the submit door every run takes (a re-run: Submissions.submit, which checks its
 *    output schema, artifacts and agent as the API's re-run does), then commit (transitions/bulk-commit.lua, fenced by the token): add
 *    the counts, move the cursor, set when the next batch may start.
 * A process killed in between leaves its lease to run out; the next process does the batch
 * again from the same cursor. Both actions are safe to repeat: cancelling an ended run changes
 * nothing (counted as done), and a re-run's idempotency key `bulk:<operation>:<run>` answers
 * with the re-run made the first time. Only the commit counts, so each run is counted once.
 *
 * Pace: a scope's operations run one after another, oldest first, and each batch moves the
 * operation's `notBefore` by its runs over BULK_RUNS_PER_SECOND, so one scope's bulk work
 * is bounded however many processes advance it, and other scopes keep their share of Redis.
 */

/** Runs one batch acts on at most (fewer when BULK_RUNS_PER_SECOND is lower). */
export const BULK_BATCH = 100;
/** A batch's lease: past it, another process does the batch again. A batch of 100 takes well under a second. */
const LEASE_MS = 10_000;
/** How long an ended operation stays readable. */
const RETENTION_MS = 7 * 24 * 3600_000;
/** Refusals that are Redis's state or the scope's submit rate, not the run's: the batch stops and is taken again later. */
const TRANSIENT = new Set(['REDIS_UNAVAILABLE', 'INTERNAL', 'CLIENT_CLOSED', 'RATE_LIMITED', 'SCHEMA_CHECKS_BUSY']);
/** The statuses (as runs show them) of runs that have not ended: what a cancel's filter means without a status. */
const UNENDED: PublicRunStatus[] = PUBLIC_RUN_STATUSES.filter((st) => !(TERMINAL_STATUSES as readonly string[]).includes(st));
/** After a transient refusal the operation waits this long. */
const BACKOFF_MS = 1_000;
/** The fields of an operation that vary in size (its filter, its latest refusal): a listing page is measured by them. */
const SIZED_FIELDS = ['filter', 'lastError'] as const;
/** What a shown operation takes beyond them (ids, kind, status, counts, times, field names), as a generous bound. */
const OPERATION_OVERHEAD_BYTES = 512;
/** What a page takes beyond its operations: `{"operations":[…],"nextCursor":"…"}`. */
const PAGE_OVERHEAD_BYTES = 512;

interface OperationRecord {
  id: string;
  scope: string;
  kind: OperationKind;
  status: OperationStatus;
  filter: RunFilter;
  allowNonIdempotent: boolean;
  matched: number;
  done: number;
  failed: number;
  createdAt: number;
  /** Runs created at or after this are left out: createdBefore, or the operation's creation. */
  before: number;
  finishedAt?: number;
  lastError?: { runId: string; code: string; message: string };
}

function parseOperation(h: Record<string, string>): OperationRecord | undefined {
  if (!h.id) return undefined;
  return {
    id: h.id, scope: h.scope, kind: h.kind as OperationKind, status: h.status as OperationStatus,
    filter: JSON.parse(h.filter) as RunFilter, allowNonIdempotent: h.allowNonIdempotent === '1',
    matched: Number(h.matched ?? 0), done: Number(h.done ?? 0), failed: Number(h.failed ?? 0),
    createdAt: Number(h.createdAt), before: Number(h.before),
    ...(h.finishedAt ? { finishedAt: Number(h.finishedAt) } : {}),
    ...(h.lastError ? { lastError: JSON.parse(h.lastError) as OperationRecord['lastError'] } : {}),
  };
}

function present(rec: OperationRecord): OperationView {
  return {
    id: rec.id, scope: rec.scope, kind: rec.kind, status: rec.status, filter: rec.filter,
    ...(rec.kind === 'rerun' ? { allowNonIdempotent: rec.allowNonIdempotent } : {}),
    matched: rec.matched, done: rec.done, failed: rec.failed, createdAt: new Date(rec.createdAt).toISOString(),
    ...(rec.finishedAt !== undefined ? { finishedAt: new Date(rec.finishedAt).toISOString() } : {}),
    ...(rec.lastError ? { lastError: rec.lastError } : {}),
  };
}

/** Operation ids sort by creation: `op<time36><hex12>`. */
function newOperationId(): string {
  return `op${Date.now().toString(36)}${randomBytes(6).toString('hex')}`;
}

/** What the API does with operations: make, read, list and stop them. */
export class BulkOperations {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Pick<Config, 'BULK_OPERATIONS_MAX_PER_SCOPE' | 'PAGE_MAX_BYTES'>,
    /** Making and stopping an operation are transitions (transitions/bulk-create.lua, bulk-cancel.lua). */
    private readonly transitions: BulkGateway,
  ) {}

  async create(scope: string, kind: OperationKind, body: BulkRequest): Promise<OperationView> {
    const now = await redisNowMs(this.redis);
    const id = newOperationId();
    const filter = { ...body.filter };
    // A re-run acts on ended runs only (the runs it makes are newer than the operation, so never
    // its own); a cancel on the others, found through their status indexes, not every run's.
    if (!filter.status) filter.status = kind === 'rerun' ? [...TERMINAL_STATUSES] : UNENDED;
    const before = filter.createdBefore ? Math.min(Date.parse(filter.createdBefore), now) : now;
    const fields: Record<string, string> = {
      id, scope, kind, status: 'running', filter: JSON.stringify(filter), allowNonIdempotent: body.allowNonIdempotent ? '1' : '0',
      matched: '0', done: '0', failed: '0', createdAt: String(now), before: String(before),
      // Newest first, strictly after this position: every run created before `before`.
      cursor: `${before - 1}_~`,
    };
    const made = await this.transitions.createOperation(scope, id, fields, { maxRunning: this.config.BULK_OPERATIONS_MAX_PER_SCOPE, now });
    if (made === 'at-cap') throw new BatonError('TOO_MANY_OPERATIONS');
    await this.redis.sadd(this.keys.operationScopes, scope);
    return present(parseOperation(fields)!);
  }

  async get(scope: string, id: string): Promise<OperationView> {
    const rec = parseOperation(await this.redis.hgetall(this.keys.scope(scope).operation(id)));
    if (!rec) throw new BatonError('OPERATION_NOT_FOUND');
    return present(rec);
  }

  /**
   * A page of the scope's operations, newest first (ended ones while they are kept): at most
   * `limit` and PAGE_MAX_BYTES of them, read as the schedules' listing reads (listing-page.ts).
   * Operations past their retention leave their index entries behind; a page drops those it meets.
   */
  async list(scope: string, o: OperationListOptions & { limit: number }): Promise<OperationList> {
    const sk = this.keys.scope(scope);
    const after = o.cursor === undefined ? undefined : parsePositionCursor(o.cursor);
    const entries = await entriesAfter(this.redis, sk.operations, after, o.limit + 1, 'newest');
    const wanted = entries.slice(0, o.limit);
    const sizes = await measure(this.redis, wanted.map((e) => sk.operation(e.id)), SIZED_FIELDS, OPERATION_OVERHEAD_BYTES);
    const page = wanted.slice(0, fitting(sizes, this.config.PAGE_MAX_BYTES - PAGE_OVERHEAD_BYTES));
    const operations: OperationView[] = [];
    const gone: string[] = [];
    (await readHashes(this.redis, page.map((e) => sk.operation(e.id)))).forEach((h, i) => {
      const rec = parseOperation(h);
      if (rec) operations.push(present(rec));
      else gone.push(page[i].id);
    });
    if (gone.length) await this.redis.zrem(sk.operations, ...gone);
    const last = page[page.length - 1];
    return { operations, nextCursor: page.length < entries.length && last ? positionCursor(last) : null };
  }

  /** Stops a running operation: no batch starts after this (a batch under way still counts what it did). */
  async cancel(scope: string, id: string): Promise<OperationView> {
    const now = await redisNowMs(this.redis);
    if (await this.transitions.cancelOperation(scope, id, { now, retentionMs: RETENTION_MS }) === 'not-found') {
      throw new BatonError('OPERATION_NOT_FOUND');
    }
    return this.get(scope, id);
  }
}

/** What one batch did. */
interface BatchResult {
  matched: number;
  done: number;
  failed: number;
  cursor: string;
  finished: boolean;
  /** Entries of the listing read (what the pace is charged for). */
  read: number;
  /** Stopped on a transient refusal: the rest of the batch later. */
  stalled: boolean;
  lastError?: OperationRecord['lastError'];
}

/** Advances the scopes' bulk operations; every API and worker process runs one. */
export class BulkWorker {
  private readonly loop: PollLoop;
  private readonly token = randomBytes(8).toString('hex');
  /** Batches this process committed (tests and logs). */
  batches = 0;

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
    private readonly config: Pick<Config, 'BULK_POLL_MS' | 'BULK_RUNS_PER_SECOND'>,
    /** A batch's claim and commit (transitions/bulk-claim.lua, bulk-commit.lua). */
    private readonly transitions: BulkGateway,
    /** A cancel, and the reads a re-run's plan takes. */
    private readonly store: RunStore,
    /** A re-run's submit: the door every run takes (submissions.ts), with the scope's submit rate limit. */
    private readonly submissions: Submissions,
    private readonly log: Logger,
  ) {
    this.loop = new PollLoop(config.BULK_POLL_MS, () => this.poll(), log, 'bulk operation poll');
  }

  start(): void {
    this.loop.start();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
  }

  /** One pass: each scope with a running operation, its oldest one, one batch. */
  async poll(): Promise<void> {
    let cursor = '0';
    do {
      const [next, scopes] = await this.redis.sscan(this.keys.operationScopes, cursor, 'COUNT', 200);
      cursor = next;
      for (const scope of scopes) await this.advance(scope);
    } while (cursor !== '0');
  }

  private async advance(scope: string): Promise<void> {
    const sk = this.keys.scope(scope);
    const [id] = await this.redis.zrange(sk.operationsActive, 0, 0);
    if (id === undefined) {
      // Leave the work list; an operation made meanwhile put the scope back (or is seen here).
      await this.redis.srem(this.keys.operationScopes, scope);
      if (await this.redis.zcard(sk.operationsActive) > 0) await this.redis.sadd(this.keys.operationScopes, scope);
      return;
    }
    const now = await redisNowMs(this.redis);
    const cursor = await this.transitions.claimBatch(scope, id, { token: this.token, now, leaseMs: LEASE_MS });
    if (cursor === undefined) return;
    const rec = parseOperation(await this.redis.hgetall(sk.operation(id)));
    if (!rec) return;
    const r = await this.batch(rec, cursor);
    const paced = Math.ceil((r.read * 1000) / this.config.BULK_RUNS_PER_SECOND);
    const notBefore = (await redisNowMs(this.redis)) + (r.stalled ? BACKOFF_MS : paced);
    const committed = await this.transitions.commitBatch(scope, id, {
      token: this.token, now, matched: r.matched, done: r.done, failed: r.failed, cursor: r.cursor,
      finished: r.finished, notBefore, lastError: r.lastError, retentionMs: RETENTION_MS,
    });
    if (committed) this.batches++;
  }

  /** The next runs of the operation's listing from `cursor`, each acted on. */
  private async batch(rec: OperationRecord, cursor: string): Promise<BatchResult> {
    const f = rec.filter;
    const size = Math.min(BULK_BATCH, this.config.BULK_RUNS_PER_SECOND);
    // A run shows `queued` while it is queued or dispatched (handed to its worker queue, not claimed).
    const status = f.status?.flatMap((st): RunStatus[] => (st === 'queued' ? ['queued', 'dispatched'] : [st]));
    const page = await listRuns(this.redis, this.keys, rec.scope, {
      status, agent: f.agent, runtime: f.runtime, sessionId: f.sessionId, limit: size, cursor,
    });
    const after = f.createdAfter ? Date.parse(f.createdAfter) : -Infinity;
    const r: BatchResult = { matched: 0, done: 0, failed: 0, cursor, finished: page.nextCursor === null, read: 0, stalled: false };
    for (const run of page.runs) {
      // Newest first: the first run older than createdAfter ends the walk.
      if (run.createdAt < after) {
        r.finished = true;
        break;
      }
      r.read++;
      if (f.concurrencyKey === undefined || run.concurrencyKey === f.concurrencyKey) {
        const outcome = await this.act(rec, run);
        if (outcome === 'transient') {
          r.read--;
          r.stalled = true;
          r.finished = false;
          break;
        }
        r.matched++;
        if (outcome === 'done') r.done++;
        else {
          r.failed++;
          r.lastError = { runId: run.id, ...outcome };
        }
      }
      r.cursor = `${run.createdAt}_${run.id}`;
    }
    return r;
  }

  /** One run: cancelled, or re-run. */
  private async act(rec: OperationRecord, run: ShownRun): Promise<'done' | 'transient' | { code: string; message: string }> {
    try {
      if (rec.kind === 'cancel') {
        // An ended run has nothing to cancel: it is as the operation wants it.
        await this.store.cancel(rec.scope, run.id);
        return 'done';
      }
      const full = await this.store.get(rec.scope, run.id);
      if (!full) throw new BatonError('RUN_NOT_FOUND');
      const plan = planRerun(full, await this.store.stepOrder(rec.scope, run.id), { allowNonIdempotent: rec.allowNonIdempotent });
      await this.submissions.submit(rerunSubmit(rec.scope, full, { idempotencyKey: `bulk:${rec.id}:${run.id}` }), { rerun: plan });
      return 'done';
    } catch (err) {
      if (!(err instanceof BatonError) || TRANSIENT.has(err.code)) {
        this.log.warn({ scope: rec.scope, operationId: rec.id, runId: run.id, err: (err as Error).message }, 'bulk operation paused on a transient error');
        return 'transient';
      }
      return { code: err.code, message: err.details?.[0]?.message ?? err.message };
    }
  }
}
