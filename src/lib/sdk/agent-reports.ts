import type { InferCall, RunContext } from './agent.ts';
import type { AgentEvent } from './select.ts';

/**
 * What the agent helpers (createChatAgent, baton/ai) say about a run besides its text: each
 * model call's token usage, each tool call and its result. This module is the one place
 * those notices are produced:
 *
 * - usage is recorded with the model call's step (`recordModelCall`, inside the step), so
 *   it is counted when, and only when, the step's result is stored;
 * - tool calls and results become `tool-call` / `tool-result` events of the context's agent,
 *   streamed when the agent selects them, never committed to the history;
 * - everything also reaches the run's log at debug level, without arguments and results,
 *   since they may carry a tenant's data.
 */

/** Token usage of one model call, as the provider reported it. */
export interface ModelUsage {
  inputTokens: number;
  outputTokens: number;
  totalTokens: number;
}

export interface ModelCallNotice {
  /** The model id the helper asked for (the provider's own answer may name a snapshot). */
  model: string;
  /** Absent when the provider reported none (a stream without usage enabled). */
  usage?: ModelUsage;
  /** true when the result came from the step memo: the provider was not called in this attempt. */
  replayed: boolean;
}

export interface ToolCallNotice {
  callId: string;
  name: string;
  args: unknown;
}

export type ToolResultNotice =
  | { callId: string; name: string; ok: true; result: unknown; replayed: boolean }
  /** The tool was not run (bad arguments, unknown tool), threw, or failed in a way that ends the attempt. */
  | {
    callId: string; name: string; ok: false; error: string; replayed: boolean;
    /** A person declined the call: it never ran. */
    declined?: true;
  };

/**
 * One request to an MCP server, as metrics count it: `tool` is the server's tool name, or
 * `(list)` / `(connect)` / `(ping)` (names no MCP tool has) for listing its tools, connecting and
 * checking it answers before a call (failures only).
 * `error`: the server or the tool answered with an error; `unavailable`: no answer.
 */
export interface McpCallNotice {
  server: string;
  tool: string;
  outcome: 'ok' | 'error' | 'unavailable';
}

/** Where a run context's tool events go: the engine attaches one to every context it makes. */
export interface RunEventSink {
  publish(event: AgentEvent): void;
  /** An MCP request was made (metrics). */
  mcpCall?(notice: McpCallNotice): void;
}

const sinks = new WeakMap<RunContext, RunEventSink>();

export function attachEventSink(ctx: RunContext, sink: RunEventSink): void {
  sinks.set(ctx, sink);
}

/**
 * A tool's arguments or result in an event are cut at this many characters of JSON: a tool
 * may return a whole document, and every reader of the run would get it in one event. The
 * step keeps the whole value (GET …/steps shows it).
 */
export const TOOL_EVENT_MAX_CHARS = 16_384;

/**
 * Called inside the model call's `ctx.infer` step once the provider answered. A call that
 * reported no usage still counts as a model call, with no tokens.
 */
export function recordModelCall(call: InferCall, model: string, usage: ModelUsage | undefined, provider?: string): void {
  const tokens = { inputTokens: usage?.inputTokens ?? 0, outputTokens: usage?.outputTokens ?? 0 };
  call.recordUsage({ model, ...tokens, ...(provider ? { provider } : {}) });
}

/** After the step, live or from the memo: the log line. */
export function reportModelCall(ctx: RunContext, notice: ModelCallNotice): void {
  ctx.log.debug({ model: notice.model, usage: notice.usage, replayed: notice.replayed }, 'model call');
}

export function reportToolCall(ctx: RunContext, notice: ToolCallNotice): void {
  ctx.log.debug({ callId: notice.callId, tool: notice.name }, 'tool call');
  const { value, truncated } = bounded(notice.args);
  sinks.get(ctx)?.publish({
    type: 'tool-call',
    data: { agent: ctx.agent, role: 'assistant', callId: notice.callId, name: notice.name, args: value, ...(truncated && { truncated }) },
  });
}

export function reportToolResult(ctx: RunContext, notice: ToolResultNotice): void {
  ctx.log.debug({ callId: notice.callId, tool: notice.name, ok: notice.ok, replayed: notice.replayed }, 'tool result');
  const sink = sinks.get(ctx);
  if (!sink) return;
  const who = { agent: ctx.agent, role: 'tool' as const, callId: notice.callId, name: notice.name };
  if (!notice.ok) {
    const error = notice.error.slice(0, TOOL_EVENT_MAX_CHARS);
    sink.publish({
      type: 'tool-result',
      data: {
        ...who, ok: false, error, ...(error.length < notice.error.length && { truncated: true }),
        ...(notice.declined && { declined: true }),
      },
    });
    return;
  }
  const { value, truncated } = bounded(notice.result);
  sink.publish({ type: 'tool-result', data: { ...who, ok: true, result: value, ...(truncated && { truncated }) } });
}

/** An MCP request this attempt made (never a memo hit: those make none). */
export function reportMcpCall(ctx: RunContext, notice: McpCallNotice): void {
  ctx.log.debug({ server: notice.server, tool: notice.tool, outcome: notice.outcome }, 'MCP request');
  sinks.get(ctx)?.mcpCall?.(notice);
}

/** The value as is when its JSON is short enough, else the start of its JSON text. */
function bounded(value: unknown): { value: unknown; truncated?: true } {
  let json: string | undefined;
  try {
    json = JSON.stringify(value ?? null);
  } catch {
    json = undefined;
  }
  // Not JSON at all (a cycle, a function): the event carries its text, as the log would.
  if (json === undefined) return { value: String(value).slice(0, TOOL_EVENT_MAX_CHARS) };
  return json.length <= TOOL_EVENT_MAX_CHARS ? { value: value ?? null } : { value: json.slice(0, TOOL_EVENT_MAX_CHARS), truncated: true };
}
