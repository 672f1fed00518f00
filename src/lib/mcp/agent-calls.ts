import { z } from 'zod';
import { ErrorCode, McpError, type CallToolResult, type Tool } from '@modelcontextprotocol/sdk/types.js';
import { ID_PATTERN } from '../contract/ids.ts';
import { TERMINAL_STATUSES } from '../contract/runs.ts';
import { BatonError } from '../errors.ts';
import { newRunId } from '../ids.ts';
import type { RunRecord, ShownRun } from '../transitions/record.ts';
import type { RunStore } from '../engine/store.ts';
import type { Submissions } from '../engine/submissions.ts';
import type { RunStreams } from '../streams/run-streams.ts';
import type { RunEvent } from '../streams/log.ts';
import type { WorkerRegistry } from '../engine/flow/worker-registry.ts';
import { followToEnd } from '../streams/follow-to-end.ts';

/**
 * Baton's agents as MCP tools (docs/mcp.md): the agents the live workers of the API's runtime
 * offer are the tools, and a call of one is a run of it, in a session of its own unless the
 * call names one. What the run streams goes to the caller as progress notifications while it
 * is connected; the run goes on, and is stored, whatever becomes of the call.
 */

/** As a submit's input.content (POST …/runs). */
const MAX_MESSAGE_CHARS = 256 * 1024;

/** A tool's arguments: the message the agent gets, and the session to continue, if any. */
const toolArguments = z.strictObject({
  message: z.string().min(1).max(MAX_MESSAGE_CHARS).describe("The message the agent answers: the run's input."),
  sessionId: z.string().regex(ID_PATTERN).optional()
    .describe('Continue this Baton session (its history); absent: a new session for this call.'),
});

const callParams = z.object({ name: z.string().regex(ID_PATTERN), arguments: z.record(z.string(), z.unknown()).optional() });

/** Every tool takes the same arguments: an agent takes a message. */
const INPUT_SCHEMA = z.toJSONSchema(toolArguments, { target: 'draft-2020-12' }) as Tool['inputSchema'];

/** What a call's notifications carry: a status change, or text the run streamed. */
export type CallProgress = (message: string) => Promise<void>;

export interface AgentCallsDeps {
  registry: WorkerRegistry;
  submissions: Submissions;
  store: RunStore;
  streams: RunStreams;
  /** The runtime whose workers serve MCP's calls (RUNTIME). */
  runtime: string;
}

export class AgentCalls {
  constructor(private readonly d: AgentCallsDeps) {}

  /** The tools: one per agent a live worker of the runtime offers, with its description. */
  async tools(): Promise<Tool[]> {
    const agents = await this.d.registry.offeredAgents(this.d.runtime);
    return agents.map((a) => ({
      name: a.name, inputSchema: INPUT_SCHEMA, execution: { taskSupport: 'optional' },
      ...(a.description === undefined ? {} : { description: a.description }),
    }));
  }

  /** Starts the run a `tools/call`'s params ask for, by the submit door; refusals as MCP errors naming the field. */
  async startCall(scope: string, params: unknown, signal: AbortSignal): Promise<RunRecord> {
    const call = callParams.safeParse(params);
    if (!call.success) throw invalid(call.error, 'params');
    const args = toolArguments.safeParse(call.data.arguments ?? {});
    if (!args.success) throw invalid(args.error, 'params.arguments');
    try {
      const made = await this.d.submissions.submit({
        scope, runtime: this.d.runtime, agent: call.data.name,
        sessionId: args.data.sessionId ?? `mcp-${newRunId()}`, input: { content: args.data.message },
      }, { signal });
      return made.run;
    } catch (err) {
      if (err instanceof BatonError) {
        const code = err.code === 'VALIDATION_FAILED' || err.code === 'UNKNOWN_AGENT' ? ErrorCode.InvalidParams : ErrorCode.InvalidRequest;
        throw new McpError(code, `${err.code}: ${err.message}`, { code: err.code, details: err.details });
      }
      throw err;
    }
  }

  /**
   * A call answered when its run ends: the run's answer as the tool's result. Its events go to
   * `progress` as they come (status changes, streamed text). Rejects when `signal` aborts: the
   * client left, and the run goes on without it.
   */
  async call(
    scope: string, params: unknown, o: { signal: AbortSignal; progress?: CallProgress },
  ): Promise<{ result: CallToolResult; run: RunRecord }> {
    const run = await this.startCall(scope, params, o.signal);
    return this.ended(scope, run.id, { ...o, fresh: true });
  }

  /**
   * A task's result (`tasks/result`): at once for a run that ended; else its events from the
   * start go to `progress` (what it streamed so far, then live) until it ends. A run of another
   * scope is not found, as one that never was.
   */
  async taskResult(
    scope: string, runId: string, o: { signal: AbortSignal; progress?: CallProgress },
  ): Promise<{ result: CallToolResult; run: RunRecord }> {
    const run = ID_PATTERN.test(runId) ? await this.d.store.get(scope, runId) : undefined;
    if (!run) throw new McpError(ErrorCode.InvalidParams, `Task not found: ${runId}`);
    if ((TERMINAL_STATUSES as readonly string[]).includes(run.status)) return { result: toolResultOf(run), run };
    return this.ended(scope, runId, { ...o, fresh: false });
  }

  /** Follows a run's events to its end, handing them to `progress`, then reads how it ended. */
  private async ended(
    scope: string, runId: string, o: { signal: AbortSignal; progress?: CallProgress; fresh: boolean },
  ): Promise<{ result: CallToolResult; run: RunRecord }> {
    let sent = Promise.resolve();
    const deliver = (events: RunEvent[]) => {
      if (!o.progress) return;
      for (const message of events.flatMap(progressOf)) {
        // In order, one at a time; a notification that cannot be sent (the client left) is dropped.
        sent = sent.then(() => o.progress!(message)).catch(() => undefined);
      }
    };
    await followToEnd(this.d.streams, scope, runId, { fresh: o.fresh, signal: o.signal }, deliver);
    await sent;
    const ended = await this.d.store.get(scope, runId);
    if (!ended) throw new McpError(ErrorCode.InternalError, `Run ${runId} is gone.`);
    return { result: toolResultOf(ended), run: ended };
  }
}

/** What an event tells a caller: the text an agent streamed, or the run's new status. */
function progressOf(e: RunEvent): string[] {
  if (e.type !== 'token' && e.type !== 'status') return [];
  const data = JSON.parse(String(e.data)) as { text?: string; status?: string; attempt?: number };
  if (e.type === 'token') return data.text ? [data.text] : [];
  return data.status ? [`[run ${data.status}${data.attempt ? `, attempt ${data.attempt}` : ''}]`] : [];
}

function invalid(error: z.ZodError, at: string): McpError {
  const details = error.issues.map((i) => ({ path: [at, ...i.path.map(String)].join('.'), message: i.message }));
  return new McpError(ErrorCode.InvalidParams, `VALIDATION_FAILED: ${details.map((x) => `${x.path}: ${x.message}`).join('; ')}`, {
    code: 'VALIDATION_FAILED', details,
  });
}

/** An ended run as a tool's result: its answer as text, its payload as structured content; an error unless it succeeded. */
export function toolResultOf(run: ShownRun): CallToolResult {
  const payload = run.result?.payload;
  const structured = typeof payload === 'object' && payload !== null && !Array.isArray(payload) ? { structuredContent: payload as Record<string, unknown> } : {};
  if (run.status === 'succeeded') return { content: [{ type: 'text', text: run.result?.answer ?? '' }], ...structured };
  const why = run.lastError ? `${run.lastError.code}: ${run.lastError.message}` : `run ${run.status}`;
  const text = run.result?.answer ? `${run.result.answer}\n\n(${why})` : why;
  return { content: [{ type: 'text', text }], isError: true };
}
