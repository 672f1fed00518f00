import type { RunContext } from './agent.ts';

/**
 * What the agent helpers (createChatAgent, baton/ai) say about a run besides its text: each
 * model call's token usage, each tool call and its result. This module is the one place
 * those notices are produced, so the tool-call/tool-result events and the usage accounting
 * (issue 15's second half) change this file, not every helper. Today they only reach the
 * run's log at debug level; arguments and results are left out of the log, since they may
 * carry a tenant's data.
 *
 * The shapes are the ones the events will carry.
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
  /** The tool was not run (bad arguments, unknown tool) or threw. */
  | { callId: string; name: string; ok: false; error: string; replayed: boolean };

export function reportModelCall(ctx: RunContext, notice: ModelCallNotice): void {
  ctx.log.debug({ model: notice.model, usage: notice.usage, replayed: notice.replayed }, 'model call');
}

export function reportToolCall(ctx: RunContext, notice: ToolCallNotice): void {
  ctx.log.debug({ callId: notice.callId, tool: notice.name }, 'tool call');
}

export function reportToolResult(ctx: RunContext, notice: ToolResultNotice): void {
  ctx.log.debug({ callId: notice.callId, tool: notice.name, ok: notice.ok, replayed: notice.replayed }, 'tool result');
}
