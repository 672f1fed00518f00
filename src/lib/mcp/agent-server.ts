import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema, GetTaskPayloadRequestSchema, ListToolsRequestSchema, RELATED_TASK_META_KEY,
  type CallToolResult, type ProgressToken, type ServerNotification, type ServerRequest,
} from '@modelcontextprotocol/sdk/types.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { CallProgress } from './agent-calls.ts';
import type { CreateTaskResult } from '@modelcontextprotocol/sdk/experimental/tasks/types.js';
import type { RunStore } from '../engine/store.ts';
import type { AgentCalls } from './agent-calls.ts';
import { RunTaskStore } from './run-tasks.ts';

/**
 * The MCP server of one request (stateless: the protocol keeps nothing between requests, so
 * any API process answers any of them), acting for one scope: its tools are the runtime's
 * agents, a call is a run of the scope, a task is one of its runs (run-tasks.ts).
 */
export interface AgentServerOptions {
  scope: string;
  calls: AgentCalls;
  store: RunStore;
  /** RETENTION_MS: a task's time to live, as long as its run stays readable. */
  retentionMs: number;
  /** Baton's version, as the server's own. */
  version: string;
  /** Aborts when the request's client left. */
  signal: AbortSignal;
  /** Told how each `tools/call` went: answered (the run ended), made a task, or refused. */
  onToolCall?(mode: 'call' | 'task', outcome: 'completed' | 'failed' | 'cancelled' | 'created' | 'refused' | 'left'): void;
}

export function createAgentServer(o: AgentServerOptions): Server {
  const taskStore = new RunTaskStore({ scope: o.scope, store: o.store, calls: o.calls, retentionMs: o.retentionMs, signal: o.signal });
  const server = new Server({ name: 'baton', version: o.version }, {
    capabilities: {
      tools: { listChanged: false },
      tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } },
    },
    taskStore,
  });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: await o.calls.tools() }));
  server.setRequestHandler(CallToolRequestSchema, async (request, extra): Promise<CallToolResult | CreateTaskResult> => {
    const mode = request.params.task ? 'task' : 'call';
    try {
      if (request.params.task) {
        // The store submits the run; the task is the run (RunTaskStore.createTask).
        const task = await extra.taskStore!.createTask({ ttl: request.params.task.ttl });
        o.onToolCall?.(mode, 'created');
        return { task };
      }
      const progress = progressSender(request.params._meta?.progressToken, extra);
      const { result, run } = await o.calls.call(o.scope, request.params, { signal: o.signal, progress });
      o.onToolCall?.(mode, run.status === 'succeeded' ? 'completed' : run.status === 'cancelled' ? 'cancelled' : 'failed');
      return result;
    } catch (err) {
      o.onToolCall?.(mode, o.signal.aborted ? 'left' : 'refused');
      throw err;
    }
  });
  // The SDK's own tasks/result polls the store every pollInterval; this one follows the run's
  // events, so it answers as the run ends and streams its text as progress meanwhile.
  server.setRequestHandler(GetTaskPayloadRequestSchema, async (request, extra) => {
    const progress = progressSender(request.params._meta?.progressToken, extra);
    const { result } = await o.calls.taskResult(o.scope, request.params.taskId, { signal: o.signal, progress });
    return { ...result, _meta: { ...result._meta, [RELATED_TASK_META_KEY]: { taskId: request.params.taskId } } };
  });
  return server;
}

/** Progress notifications for a request that asked for them (a progressToken), numbered from 1. */
function progressSender(
  token: ProgressToken | undefined, extra: RequestHandlerExtra<ServerRequest, ServerNotification>,
): CallProgress | undefined {
  if (token === undefined) return undefined;
  let progress = 0;
  return (message) => extra.sendNotification({ method: 'notifications/progress', params: { progressToken: token, progress: ++progress, message } });
}
