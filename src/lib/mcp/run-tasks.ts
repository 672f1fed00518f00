import type { CreateTaskOptions, TaskStore } from '@modelcontextprotocol/sdk/experimental/tasks/interfaces.js';
import { ErrorCode, McpError, type Request, type RequestId, type Result, type Task } from '@modelcontextprotocol/sdk/types.js';
import { ID_PATTERN } from '../contract/ids.ts';
import { TERMINAL_STATUSES } from '../contract/runs.ts';
import type { RunRecord, ShownRun } from '../transitions/record.ts';
import type { RunStore } from '../engine/store.ts';
import { toolResultOf, type AgentCalls } from './agent-calls.ts';

/**
 * MCP's tasks (the 2025-11-25 specification's `tasks`, `@modelcontextprotocol/sdk`'s
 * `TaskStore`) on Baton's runs: a task is a run of the scope, its id the run's id. Nothing is
 * held in a process: a task's status and result are read from its run record each time, so a
 * task outlives the worker that runs it and the API process that made it, and any API process
 * answers for it. One store per request, bound to the scope of the request's key: a task id of
 * another scope is not found, as one that never was.
 */

/** How often a client is told to poll a task: a run's status changes within a step, not within a token. */
const POLL_INTERVAL_MS = 1_000;

/**
 * A task's cancel waits this long for its run to end, so the answer says how it ended: a running
 * run stops at its worker's next heartbeat or step (a run that returned its answer meanwhile
 * ends succeeded, and the task says completed).
 */
const CANCEL_SETTLE_MS = 5_000;
const CANCEL_POLL_MS = 100;

const isTerminal = (run: RunRecord) => (TERMINAL_STATUSES as readonly string[]).includes(run.status);

export interface RunTaskStoreDeps {
  scope: string;
  store: RunStore;
  calls: AgentCalls;
  /** RETENTION_MS: how long a finished run stays readable, so its task's time to live. */
  retentionMs: number;
  /** Aborts when the request's client left: a submit it asked for is dropped before it is made. */
  signal: AbortSignal;
}

export class RunTaskStore implements TaskStore {
  constructor(private readonly d: RunTaskStoreDeps) {}

  /** A `tools/call` made as a task: its agent's run is submitted, and the task is that run. */
  async createTask(_params: CreateTaskOptions, _requestId: RequestId, request: Request): Promise<Task> {
    const run = await this.d.calls.startCall(this.d.scope, request.params, this.d.signal);
    return this.taskOf(run);
  }

  async getTask(taskId: string): Promise<Task | null> {
    const run = await this.run(taskId);
    return run ? this.taskOf(run) : null;
  }

  /** A task's result is its run's, stored by the worker that finished it: nothing else writes one. */
  storeTaskResult(): Promise<void> {
    return Promise.reject(new McpError(ErrorCode.InvalidRequest, "A task's result is its run's, stored when the run ends."));
  }

  async getTaskResult(taskId: string): Promise<Result> {
    const run = await this.run(taskId);
    if (!run) throw new McpError(ErrorCode.InvalidParams, `Task not found: ${taskId}`);
    if (!isTerminal(run)) throw new McpError(ErrorCode.InvalidRequest, `Task ${taskId} has not ended.`);
    return toolResultOf(run);
  }

  /** A client may only cancel: the task's run is cancelled, and the answer waits a little for it to end. */
  async updateTaskStatus(taskId: string, status: Task['status']): Promise<void> {
    if (status !== 'cancelled') throw new McpError(ErrorCode.InvalidRequest, "A task's status is its run's; a client may only cancel it.");
    const run = await this.run(taskId);
    if (!run) throw new McpError(ErrorCode.InvalidParams, `Task not found: ${taskId}`);
    await this.d.store.cancel(this.d.scope, run.id);
    for (let waited = 0; waited < CANCEL_SETTLE_MS; waited += CANCEL_POLL_MS) {
      const now = await this.d.store.get(this.d.scope, run.id);
      if (!now || isTerminal(now)) return;
      await new Promise((r) => setTimeout(r, CANCEL_POLL_MS));
    }
  }

  /** The scope's runs, newest first, a page at a time (the run listing's own cursor). */
  async listTasks(cursor?: string): Promise<{ tasks: Task[]; nextCursor?: string }> {
    const page = await this.d.store.list(this.d.scope, { limit: 50, cursor });
    const tasks = page.runs.map((r) => this.taskOf(r));
    return page.nextCursor === null ? { tasks } : { tasks, nextCursor: page.nextCursor };
  }

  /** The run a task id names in this scope; undefined for every id that names none. */
  private async run(taskId: string): Promise<RunRecord | undefined> {
    return ID_PATTERN.test(taskId) ? this.d.store.get(this.d.scope, taskId) : undefined;
  }

  private taskOf(run: ShownRun): Task {
    const { status, statusMessage } = taskStatusOf(run);
    return {
      taskId: run.id, status, ttl: this.d.retentionMs, pollInterval: POLL_INTERVAL_MS,
      createdAt: new Date(run.createdAt).toISOString(), lastUpdatedAt: new Date(run.updatedAt).toISOString(),
      ...(statusMessage === undefined ? {} : { statusMessage }),
    };
  }
}

/**
 * A run's status as a task's: its three ends, and `working` for every other (a run that waits
 * for input or is blocked waits for Baton's own API, not for the MCP client: the message says which).
 */
export function taskStatusOf(run: ShownRun): { status: Task['status']; statusMessage?: string } {
  switch (run.status) {
    case 'succeeded': return { status: 'completed' };
    case 'cancelled': return { status: 'cancelled' };
    case 'failed':
    case 'expired': return { status: 'failed', statusMessage: run.lastError ? `${run.lastError.code}: ${run.lastError.message}` : run.status };
    case 'waiting': return { status: 'working', statusMessage: `run ${run.status}: ${(run.waits ?? []).map((w) => w.key).join(', ')}` };
    case 'blocked': return { status: 'working', statusMessage: `run blocked on step ${run.blocked?.stepKey ?? '?'}: an operator resolves it` };
    default: return { status: 'working', statusMessage: run.cancelRequested ? 'run cancelling' : `run ${run.status === 'dispatched' ? 'queued' : run.status}` };
  }
}
