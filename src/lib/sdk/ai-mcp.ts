import { jsonSchema, tool, type Tool, type ToolExecutionOptions, type ToolSet } from 'ai';
import type { RunContext } from './agent.ts';
import { durableTools, type DurableToolOptions } from './ai.ts';
import { reportToolCall, reportToolResult } from './agent-reports.ts';
import { checkMcpServers, isIdempotent, McpSession, needsApproval, type McpServerConfig } from './mcp-servers.ts';
import { holdToolFailure } from './tool-failures.ts';

export interface DurableMcpTools {
  /** The servers' tools, named `<server>__<tool>`: pass them to generateText/streamText beside your own. */
  tools: ToolSet;
  /** Closes the connections this attempt opened (a stdio server's child process ends with it): call it in a finally. */
  close(): Promise<void>;
}

/**
 * MCP servers' tools for the AI SDK's loop, durable as `durableTools` makes a tool: the list
 * is a memoized step (`step:mcp.<server>.tools:1`), so every attempt of the run offers the
 * model the same tools; each call is a memoized `ctx.tool` step, idempotent when the tool
 * says `readOnlyHint` or `idempotentHint` and non-idempotent otherwise (an unknown outcome
 * blocks the run), waiting for approval as its server's `approval` says. An error the tool
 * or the server answers with reaches the model as the tool's error (stored: a retry replays
 * it); a server that does not answer ends the attempt as transient, naming the server.
 *
 *   const mcp = await durableMcpTools(ctx, { github: { url, headers: { authorization: `Bearer ${token}` } } });
 *   try { ... streamText({ model, tools: { ...durableTools(ctx, mine), ...mcp.tools }, ... }) ... }
 *   finally { await mcp.close(); }
 *
 * Credentials come from the agent's configuration (the worker's environment), never from a
 * run's input.
 */
export async function durableMcpTools(ctx: RunContext, servers: Record<string, McpServerConfig>): Promise<DurableMcpTools> {
  checkMcpServers(ctx.agent, servers);
  const session = new McpSession(ctx, servers);
  try {
    const listed = await session.tools();
    const raw: Record<string, Tool> = {};
    const options: Record<string, DurableToolOptions> = {};
    for (const t of listed) {
      raw[t.agentName] = tool({
        description: t.description,
        inputSchema: jsonSchema(t.inputSchema),
        execute: async (input: unknown, call: ToolExecutionOptions) => {
          const outcome = await session.call(t, input, call.abortSignal ?? ctx.signal);
          // Thrown plainly, durableTools stores it as the tool's error and the model reads it.
          if (!outcome.ok) throw new Error(outcome.error);
          return outcome.value;
        },
      });
      options[t.agentName] = { idempotent: isIdempotent(t), approval: needsApproval(servers[t.server], t) };
    }
    const durable = durableTools(ctx, raw, options);
    const tools: ToolSet = {};
    for (const t of listed) {
      const inner = durable[t.agentName];
      tools[t.agentName] = {
        ...inner,
        // Checked before the step begins: a server that is down ends the attempt before a
        // non-idempotent call is marked started, so the retry calls it instead of blocking.
        execute: async (input: unknown, call: ToolExecutionOptions) => {
          try {
            await session.ready(t.server);
          } catch (err) {
            holdToolFailure(ctx, err);
            const who = { callId: call.toolCallId, name: t.agentName };
            reportToolCall(ctx, { ...who, args: input });
            reportToolResult(ctx, { ...who, ok: false, error: (err as Error).message, replayed: false });
            throw err;
          }
          return inner.execute!(input, call);
        },
      };
    }
    return { tools, close: () => session.close() };
  } catch (err) {
    await session.close();
    throw err;
  }
}
