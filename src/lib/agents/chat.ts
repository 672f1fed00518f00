import OpenAI from 'openai';
import type { ChatCompletionMessageParam, ChatCompletionTool } from 'openai/resources/chat/completions';
import {
  defineAgent, type Agent, type AgentResult, type HistoryMessage, type RateLimitRequest, type RunContext, type SteeringMessage,
} from '../sdk/agent.ts';
import { BUCKET_NAME } from '../config/rate-limits.ts';
import { reportToolCall, reportToolResult } from '../sdk/agent-reports.ts';
import type { MemoryOption } from '../sessions/memory-session.ts';
import type { Config } from '../config/index.ts';
import { isToolDeclinedError, PermanentError } from '../sdk/errors.ts';
import { modelTurn, type ModelTurn } from './chat-model-call.ts';
import {
  prepareTools, toolDeclinedContent, toolErrorContent, toolResultContent, type ChatTool, type PreparedTool,
} from './chat-tools.ts';
import { recalledTurnsPrompt } from './recalled-turns.ts';
import { mcpChatTools } from './chat-mcp.ts';
import { checkMcpServers, McpSession, type McpServerConfig } from '../sdk/mcp-servers.ts';

export { defineTool, type ChatTool, type JsonSchema, type ToolCallContext } from './chat-tools.ts';

/** Model calls a chat agent makes per run unless told otherwise: room for a few rounds of tools. */
export const DEFAULT_MAX_STEPS = 10;

export interface ChatAgentOptions {
  /** The agent's name (what a submit names). */
  name: string;
  /** The model id the endpoint serves. */
  model: string;
  /**
   * Any OpenAI-compatible endpoint. When absent: OPENAI_BASE_URL from the environment, else
   * the OpenAI API (as the `openai` package does).
   */
  baseURL?: string;
  /**
   * When absent: OPENAI_API_KEY from the environment. A local server that needs no key needs
   * none (a placeholder is sent then), but the API without a key is a configuration error.
   */
  apiKey?: string;
  /** A system message, fixed or per run (e.g. from ctx.metadata); none when absent or empty. */
  system?: string | ((ctx: RunContext) => string | undefined);
  /** Tools the model may call, by name (the name the model sees and the tool's step name). */
  tools?: Record<string, ChatTool>;
  /**
   * MCP servers whose tools the model may call too, by a name of yours (`<name>__<tool>` is
   * what the model sees): `{ url, headers? }` (streamable HTTP) or `{ command, args?, env? }`
   * (stdio), with an approval policy each. Credentials belong here, from the worker's
   * configuration, never in a run's input. See docs/mcp.md.
   */
  mcpServers?: Record<string, McpServerConfig>;
  /**
   * Model calls per run, default 10. When the model still asks for tools after the last one,
   * those calls are not run and the run ends with finishReason `length`: the answer so far
   * is committed marked incomplete.
   */
  maxSteps?: number;
  /**
   * No answer byte for this long fails the attempt as transient. 60 s: long enough for a
   * slow first token from a large model, short enough that a hung connection is retried
   * well within a lease's lifetime of heartbeats.
   */
  timeoutMs?: number;
  /**
   * The most tokens one answer may take (sent as `max_completion_tokens`). Also what a model
   * call reserves of its rate-limit bucket's tokens beyond the prompt: with it, a bucket's
   * tpm holds for every call (docs/rate-limits.md), and what the scope's daily token budget
   * holds for it beyond the prompt. Absent: the provider's own limit, and the call's estimate
   * is its prompt alone (the answer can take the budget past its limit: docs/tenancy.md).
   * The built-in `chat` agent sets CHAT_MAX_TOKENS.
   */
  maxTokens?: number;
  /**
   * The provider rate-limit bucket (RATE_LIMITS) each model call takes a grant from first.
   * Default: `openai:<model>` when RATE_LIMITS defines it (no bucket otherwise); a name: that
   * bucket, which RATE_LIMITS must define; false: none.
   */
  rateLimit?: string | false;
  /** As on any agent: default attempts for its runs, and where its history lives. */
  maxAttempts?: number;
  memory?: MemoryOption;
}

/**
 * An agent that talks to an OpenAI-compatible chat completions endpoint (the `openai`
 * package) in a tool-calling loop: the session history plus the new message go to the
 * model; while it asks for tools, each call is checked against the tool's schema, run, and
 * its result sent back; its text streams to readers token by token.
 *
 * Durability: each model call is a memoized `ctx.infer` step holding the whole response
 * (text, tool calls, usage), each tool run a memoized `ctx.tool` step, so a retry or a
 * recovery after a crash repeats neither: it replays the stored text and results and goes
 * on from the first step that never finished. Arguments that fail a tool's schema (or are
 * not JSON) go back to the model as a tool error, which it can correct.
 *
 * Retries are Baton's job, not the SDK's (`maxRetries: 0`): provider errors reach the retry
 * policy, which retries 408/425/429/5xx (honouring Retry-After), network errors and cut
 * streams, and fails 400/401/404 at once.
 *
 * The answer is the text of every model call of the run, in order, separated by a blank
 * line: the same text readers saw streamed. Caller memory, when given, reaches the model as
 * a system message (it is context, never history).
 *
 * The endpoint is settled here, when the agent module loads: `apiKey` and `baseURL`, else
 * OPENAI_API_KEY and OPENAI_BASE_URL from the environment. With neither a key nor a base
 * URL it throws, naming the agent, so a worker refuses to start with it rather than
 * offering an agent whose every run would fail.
 */
export function createChatAgent(options: ChatAgentOptions): Agent {
  const endpoint = chatEndpoint(options.name, {
    baseURL: given(options.baseURL) ?? given(process.env.OPENAI_BASE_URL),
    apiKey: given(options.apiKey) ?? given(process.env.OPENAI_API_KEY),
  });
  if (!endpoint) {
    throw new TypeError(
      `agent ${JSON.stringify(options.name)} has no model endpoint: pass apiKey (for the OpenAI API) or baseURL to createChatAgent, ` +
      'or set OPENAI_API_KEY or OPENAI_BASE_URL in the environment of the worker that loads it',
    );
  }
  return chatAgent(options, () => endpoint);
}

/** Where a chat agent sends its model calls. */
interface ChatEndpoint { baseURL?: string; apiKey?: string }

/** A setting that was given: not absent and not blank. */
const given = (v: string | undefined) => (v?.trim() ? v.trim() : undefined);

/** The endpoint, or undefined when there is neither a key nor a base URL; a base URL that is no http(s) URL throws. */
function chatEndpoint(name: string, e: ChatEndpoint): ChatEndpoint | undefined {
  if (e.baseURL !== undefined && !isHttpUrl(e.baseURL)) {
    throw new TypeError(`agent ${JSON.stringify(name)}: the base URL ${JSON.stringify(e.baseURL)} is not an http(s) URL`);
  }
  return e.baseURL !== undefined || e.apiKey !== undefined ? e : undefined;
}

function isHttpUrl(text: string): boolean {
  try {
    return /^https?:$/.test(new URL(text).protocol);
  } catch {
    return false;
  }
}

/** What the built-in agent takes from a submit's metadata (builtinChatAgent). */
interface PerRun {
  /** A lower limit than maxTokens for one run, or undefined. */
  runMaxTokens?(ctx: RunContext): number | undefined;
  /** Turns the caller holds, sent before the session's history. */
  callerTurns?(ctx: RunContext): ChatCompletionMessageParam[];
  /**
   * Function tools the caller runs itself (OpenAI's function calling): a model turn that calls
   * any of them ends the run, its calls in the result's payload (`functionCalls`).
   */
  callerTools?(ctx: RunContext): ChatCompletionTool[];
  /** Calls the caller ran and their outputs, sent after the input: an assistant turn with the calls, then each output. */
  callerToolTurn?(ctx: RunContext): ChatCompletionMessageParam[];
}

/** A call of a tool the caller runs, as a run's payload carries it. */
export interface FunctionCall { callId: string; name: string; arguments: string }

/** createChatAgent with its endpoint from `endpoint()`, asked when the agent first runs (it may throw). */
function chatAgent(options: ChatAgentOptions & PerRun, endpoint: () => ChatEndpoint): Agent {
  const { name, model } = options;
  const maxSteps = options.maxSteps ?? DEFAULT_MAX_STEPS;
  if (!Number.isInteger(maxSteps) || maxSteps < 1) throw new TypeError(`agent ${JSON.stringify(name)}: maxSteps must be a positive integer`);
  const tools = prepareTools(name, options.tools ?? {});
  checkMcpServers(name, options.mcpServers);
  const mcpServers = Object.keys(options.mcpServers ?? {}).length ? options.mcpServers : undefined;
  const maxTokens = options.maxTokens;
  if (maxTokens !== undefined && (!Number.isInteger(maxTokens) || maxTokens < 1)) {
    throw new TypeError(`agent ${JSON.stringify(name)}: maxTokens must be a positive integer`);
  }
  const rateLimit = chatRateLimit(name, model, options.rateLimit);
  const byName = new Map(tools.map((t) => [t.name, t]));
  let client: OpenAI | undefined;
  const clientFor = () => {
    if (client) return client;
    const { baseURL, apiKey } = endpoint();
    // Both are passed, the key even when there is none (a local server): the SDK reads no
    // environment behind the agent's back.
    client = new OpenAI({ baseURL, apiKey: apiKey ?? 'not-needed', maxRetries: 0, timeout: options.timeoutMs ?? 60_000 });
    return client;
  };

  return defineAgent({
    name,
    maxAttempts: options.maxAttempts,
    memory: options.memory,
    async run(ctx) {
      const mcp = mcpServers && new McpSession(ctx, mcpServers);
      try {
        const listed = mcp ? await mcpChatTools(ctx, name, mcp, new Set(byName.keys())) : [];
        return await loop(ctx, listed);
      } finally {
        await mcp?.close();
      }
    },
  });

  /** The tool-calling loop of one attempt; `listed`: the MCP servers' tools, beside the agent's own. */
  async function loop(ctx: RunContext, listed: PreparedTool[]): Promise<AgentResult> {
    const runTools = listed.length ? new Map([...byName, ...listed.map((t) => [t.name, t] as const)]) : byName;
    const openai = clientFor();
    const system = typeof options.system === 'function' ? options.system(ctx) : options.system;
    const messages = chatMessages(ctx, system, options.callerTurns?.(ctx));
    messages.push(...(options.callerToolTurn?.(ctx) ?? []));
    const callerTools = options.callerTools?.(ctx) ?? [];
    const callers = new Set(callerTools.map((t) => (t.type === 'function' ? t.function.name : '')));
    const all = [...tools.map((t) => t.definition), ...listed.map((t) => t.definition), ...callerTools];
    const definitions = all.length ? { tools: all } : {};
    const asked = options.runMaxTokens?.(ctx);
    const limit = asked !== undefined && maxTokens !== undefined ? Math.min(asked, maxTokens) : asked ?? maxTokens;
    const limits = limit === undefined ? {} : { max_completion_tokens: limit };
    let answer = '';
    for (let step = 1; ; step++) {
      const turn = await modelTurn(ctx, openai, { model, messages, ...definitions, ...limits }, {
        stepName: name, turn: step, separator: answer ? '\n\n' : '', rateLimit,
      });
      if (turn.text) answer += (answer ? '\n\n' : '') + turn.text;
      if (turn.finishReason === 'length') return { answer, finishReason: 'length' };
      if (turn.toolCalls.length === 0) {
        // Messages sent while it answered: the model is called once more with them (room allowing;
        // left untaken, each becomes the session's next turn).
        const steered = step < maxSteps ? await ctx.steering.take() : [];
        if (steered.length === 0) return { answer, finishReason: 'stop' };
        messages.push({ role: 'assistant', content: turn.text }, ...steered.map(userMessage));
        continue;
      }
      // The caller runs these: the run ends with every call of the turn, as OpenAI's function calling does.
      if (turn.toolCalls.some((c) => callers.has(c.name))) {
        const functionCalls: FunctionCall[] = turn.toolCalls.map((c) => ({ callId: c.id, name: c.name, arguments: c.arguments }));
        return { answer, finishReason: 'stop', payload: { functionCalls } };
      }
      if (step >= maxSteps) {
        ctx.emit(`[stopped after ${maxSteps} model calls]`, { ephemeral: true });
        return { answer, finishReason: 'length' };
      }
      messages.push(assistantMessage(turn));
      // One after another, in the model's order: the step keys and the side effects keep
      // the same order in every attempt.
      for (const call of turn.toolCalls) {
        messages.push({ role: 'tool', tool_call_id: call.id, content: await runTool(ctx, runTools, call) });
      }
      // The boundary: the step and its tool calls are done, the next model call reads what was sent meanwhile.
      messages.push(...(await ctx.steering.take()).map(userMessage));
    }
  }
}

/**
 * The bucket a chat agent's model calls take grants from: the one named, none (false), or by
 * default `openai:<model>` if RATE_LIMITS defines it (a model id no bucket name can hold has none).
 */
function chatRateLimit(name: string, model: string, option: string | false | undefined): RateLimitRequest | undefined {
  if (option === false) return undefined;
  if (option === undefined) {
    const key = `openai:${model}`;
    return BUCKET_NAME.test(key) ? { key, optional: true } : undefined;
  }
  if (typeof option !== 'string' || !BUCKET_NAME.test(option)) {
    throw new TypeError(`agent ${JSON.stringify(name)}: rateLimit must be false or a bucket name matching ${BUCKET_NAME.source}`);
  }
  return { key: option };
}

/** The content of the tool message answering `call`: the tool's result or why it did not run. */
async function runTool(ctx: RunContext, tools: Map<string, PreparedTool>, call: ModelTurn['toolCalls'][number]): Promise<string> {
  const prepared = tools.get(call.name);
  const refuse = (error: string, problems?: string[]) => {
    reportToolResult(ctx, { callId: call.id, name: call.name, ok: false, error, replayed: false });
    return toolErrorContent(error, problems);
  };
  let raw: unknown;
  try {
    raw = call.arguments.trim() ? JSON.parse(call.arguments) : {};
  } catch (err) {
    reportToolCall(ctx, { callId: call.id, name: call.name, args: call.arguments });
    return refuse(`the arguments are not valid JSON (${(err as Error).message}); send a JSON object`);
  }
  reportToolCall(ctx, { callId: call.id, name: call.name, args: raw });
  if (!prepared) return refuse(`there is no tool named ${JSON.stringify(call.name)}; the tools are: ${[...tools.keys()].join(', ')}`);
  const checked = await prepared.check(raw);
  if (!checked.ok) return refuse(`the arguments do not match the parameters of ${call.name}`, checked.problems);

  let ran = false;
  let result: unknown;
  try {
    await prepared.ready?.();
    result = await ctx.tool(call.name, checked.args, (args, step) => {
      ran = true;
      return prepared.tool.execute(args, { ...step, toolCallId: call.id, ctx });
    }, { idempotent: prepared.tool.idempotent ?? true, approval: prepared.tool.approval ?? false });
  } catch (err) {
    // A person said no: the model hears it as the tool's answer and decides what to do next.
    if (isToolDeclinedError(err)) {
      reportToolResult(ctx, { callId: call.id, name: call.name, ok: false, error: err.message, replayed: false, declined: true });
      return toolDeclinedContent(call.name, err.reason);
    }
    // The attempt ends as the error says (a TransientError retries it); readers see why first.
    if (!ctx.signal.aborted) reportToolResult(ctx, { callId: call.id, name: call.name, ok: false, error: describe(err), replayed: false });
    throw err;
  }
  reportToolResult(ctx, { callId: call.id, name: call.name, ok: true, result, replayed: !ran });
  return toolResultContent(result);
}

const describe = (err: unknown) => (err instanceof Error ? err.message : String(err));

const userMessage = (m: SteeringMessage): ChatCompletionMessageParam => ({ role: 'user', content: m.content });

function assistantMessage(turn: ModelTurn): ChatCompletionMessageParam {
  return {
    role: 'assistant',
    content: turn.text || null,
    tool_calls: turn.toolCalls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } })),
  };
}

function chatMessages(
  ctx: RunContext, system: string | undefined, earlier: ChatCompletionMessageParam[] = [],
): ChatCompletionMessageParam[] {
  const out: ChatCompletionMessageParam[] = [];
  if (system) out.push({ role: 'system', content: system });
  if (ctx.memory !== undefined) {
    out.push({ role: 'system', content: `Context from the caller (JSON, not part of the conversation): ${JSON.stringify(ctx.memory)}` });
  }
  const recalled = recalledTurnsPrompt(ctx.memoryBlocks);
  if (recalled) out.push({ role: 'system', content: recalled });
  for (const m of earlier) out.push(m);
  for (const m of ctx.history) out.push(toChatMessage(m));
  out.push({ role: 'user', content: ctx.input.content });
  return out;
}

/**
 * The built-in agent's `metadata.messages` of a submit: earlier turns the caller holds (the OpenAI-compatible API's
 * chat completions, which carry the whole conversation in each request), before the session's own history:
 * user and assistant text, an assistant's calls of the caller's tools (`toolCalls`: FunctionCall[]) and their
 * outputs (`{ role: 'tool', callId, content }`). Anything else there is no turn and is skipped.
 */
function callerTurns(ctx: RunContext): ChatCompletionMessageParam[] {
  const messages = ctx.metadata.messages;
  if (!Array.isArray(messages)) return [];
  return messages.flatMap((m: unknown): ChatCompletionMessageParam[] => {
    const { role, content, toolCalls, callId } = (m ?? {}) as { role?: unknown; content?: unknown; toolCalls?: unknown; callId?: unknown };
    if (typeof content !== 'string') return [];
    if (role === 'user') return [{ role, content }];
    if (role === 'tool') return typeof callId === 'string' ? [{ role, tool_call_id: callId, content }] : [];
    if (role !== 'assistant') return [];
    const calls = functionCallsOf(toolCalls);
    return [calls.length ? { role, content: content || null, tool_calls: calls.map(toolCallOf) } : { role, content }];
  });
}

/** The well-formed FunctionCalls of `value` (metadata a submit gave), none when it is no array. */
function functionCallsOf(value: unknown): FunctionCall[] {
  if (!Array.isArray(value)) return [];
  return value.filter((c: Partial<FunctionCall> | null): c is FunctionCall =>
    typeof c?.callId === 'string' && typeof c.name === 'string' && typeof c.arguments === 'string');
}

const toolCallOf = (c: FunctionCall) => ({ id: c.callId, type: 'function' as const, function: { name: c.name, arguments: c.arguments } });

/** The built-in agent's `metadata.tools`: function tools the caller runs (`{ name, description?, parameters? }`). */
function callerTools(ctx: RunContext): ChatCompletionTool[] {
  const tools = ctx.metadata.tools;
  if (!Array.isArray(tools)) return [];
  return tools.flatMap((t: unknown): ChatCompletionTool[] => {
    const { name, description, parameters } = (t ?? {}) as { name?: unknown; description?: unknown; parameters?: unknown };
    if (typeof name !== 'string') return [];
    return [{
      type: 'function',
      function: {
        name, ...(typeof description === 'string' ? { description } : {}),
        ...(parameters && typeof parameters === 'object' ? { parameters: parameters as Record<string, unknown> } : {}),
      },
    }];
  });
}

/**
 * The built-in agent's `metadata.toolTurn`: calls the caller ran and their outputs, sent after the input, as
 * messages: `{ text?, calls: FunctionCall[], outputs: { callId, output }[] }` (the Responses API's one round),
 * or an array of such rounds in order (a chat completion's conversation after its last user message).
 */
function callerToolTurn(ctx: RunContext): ChatCompletionMessageParam[] {
  const given = ctx.metadata.toolTurn;
  const rounds = (Array.isArray(given) ? given : [given]) as ({ text?: unknown; calls?: unknown; outputs?: unknown } | undefined)[];
  return rounds.flatMap((round): ChatCompletionMessageParam[] => {
    if (!Array.isArray(round?.calls) || !Array.isArray(round.outputs)) return [];
    const text = typeof round.text === 'string' ? round.text : '';
    const calls = functionCallsOf(round.calls);
    return [
      calls.length ? { role: 'assistant', content: text || null, tool_calls: calls.map(toolCallOf) } : { role: 'assistant', content: text },
      ...(round.outputs as { callId: string; output: string }[]).map((o): ChatCompletionMessageParam => ({ role: 'tool', tool_call_id: o.callId, content: o.output })),
    ];
  });
}

function toChatMessage(m: HistoryMessage): ChatCompletionMessageParam {
  switch (m.role) {
    case 'system': return { role: 'system', content: m.content };
    case 'user': return { role: 'user', content: m.content };
    case 'tool': return { role: 'tool', content: m.content, tool_call_id: m.toolCallId ?? '' };
    case 'assistant':
      return m.toolCalls?.length
        ? {
          role: 'assistant', content: m.content || null,
          tool_calls: m.toolCalls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } })),
        }
        : { role: 'assistant', content: m.content };
  }
}

/** The settings of the built-in `chat` agent, as the process's configuration holds them. */
export type BuiltinChatSettings = Pick<Config, 'OPENAI_BASE_URL' | 'OPENAI_API_KEY' | 'OPENAI_MODEL' | 'CHAT_MAX_TOKENS'>;

/**
 * The built-in `chat` agent: createChatAgent with no tools, its endpoint from OPENAI_*, its
 * answers' length capped at CHAT_MAX_TOKENS (so a call's estimate, which the token budget
 * holds and the provider bucket reserves, is what it can use), and `metadata.system` (a
 * string) of a submit as its system message and `metadata.maxTokens` (a positive integer) as a
 * lower limit for that run's answers (the OpenAI-compatible API's `max_output_tokens`), and
 * `metadata.messages` (user and assistant turns) before the session's history; `metadata.tools`
 * are function tools its caller runs, and `metadata.toolTurn` their calls' outputs (callerTools,
 * callerToolTurn). Every worker offers
 * it, configured or not (`baton start` must come up without a model): unconfigured, each of
 * its runs fails with CHAT_NOT_CONFIGURED, saying what to set.
 */
export function builtinChatAgent(settings: BuiltinChatSettings): Agent {
  const endpoint = chatEndpoint('chat', { baseURL: given(settings.OPENAI_BASE_URL), apiKey: given(settings.OPENAI_API_KEY) });
  return chatAgent({
    name: 'chat',
    model: settings.OPENAI_MODEL,
    maxTokens: settings.CHAT_MAX_TOKENS,
    system: (ctx) => (typeof ctx.metadata.system === 'string' ? ctx.metadata.system : undefined),
    runMaxTokens: (ctx) => {
      const asked = ctx.metadata.maxTokens;
      return typeof asked === 'number' && Number.isInteger(asked) && asked >= 1 ? asked : undefined;
    },
    callerTurns,
    callerTools,
    callerToolTurn,
  }, () => {
    if (endpoint) return endpoint;
    throw new PermanentError(
      'the built-in chat agent has no model endpoint: set OPENAI_API_KEY (for the OpenAI API) or OPENAI_BASE_URL where the worker runs',
      'CHAT_NOT_CONFIGURED',
    );
  });
}
