import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { CallToolRequestSchema, ListToolsRequestSchema, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
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
      const token = request.params._meta?.progressToken;
      let progress = 0;
      const { result, run } = await o.calls.call(o.scope, request.params, {
        signal: o.signal,
        progress: token === undefined ? undefined : (message) => extra.sendNotification({
          method: 'notifications/progress', params: { progressToken: token, progress: ++progress, message },
        }),
      });
      o.onToolCall?.(mode, run.status === 'succeeded' ? 'completed' : run.status === 'cancelled' ? 'cancelled' : 'failed');
      return result;
    } catch (err) {
      o.onToolCall?.(mode, o.signal.aborted ? 'left' : 'refused');
      throw err;
    }
  });
  return server;
}
