import { Ajv, type ValidateFunction } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { z } from 'zod';
import type { ChatCompletionTool } from 'openai/resources/chat/completions';
import type { RunContext, StepCall } from '../sdk/agent.ts';
import { ID_PATTERN } from '../keys.ts';

/** What a tool's `execute` gets besides its arguments. */
export interface ToolCallContext extends StepCall {
  /** The model's id for this call (what its result answers). */
  toolCallId: string;
  /** The run the tool works for (its id, scope, signal, emit). */
  ctx: RunContext;
}

/** A JSON Schema object (the model sees it as the tool's parameters). */
export type JsonSchema = Record<string, unknown>;

// `any` by default: a bare `ChatTool` is a tool of whatever arguments (a list of tools mixes
// them), and an `execute` written against it reads its arguments without casts.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export interface ChatTool<A = any, R = unknown> {
  /** Tells the model what the tool does and when to call it. */
  description: string;
  /**
   * The arguments: a zod 4 schema (parsed with it, so defaults and transforms apply) or a JSON
   * Schema (checked with ajv). Arguments that fail it are not passed to `execute`: the model
   * gets a tool error message naming the problems and may try again.
   */
  parameters: z.ZodType<A> | JsonSchema;
  /**
   * Runs the tool once per model request for it, as a memoized `ctx.tool` step: a retry or a
   * recovery gets the stored result back instead of running it again. The result must be
   * JSON; a string is handed to the model as is, anything else JSON-encoded. What it throws
   * steers the run like any agent error (TransientError retries the run, others fail it).
   */
  execute(args: A, call: ToolCallContext): Promise<R> | R;
  /**
   * false: a crash between the start and the stored result blocks the run for an operator
   * instead of running the tool again (for side effects that must not happen twice).
   * Default true.
   */
  idempotent?: boolean;
  /**
   * true: each call waits for a person to allow it before `execute` runs (a wait of kind
   * `approval` whose prompt is the arguments; the run holds no worker meanwhile). A decline
   * goes back to the model as the tool's answer, with the reason given, and the loop goes on.
   */
  approval?: boolean;
}

/** Typed helper: `defineTool({ parameters: z.object({ city: z.string() }), execute: ({ city }) => ... })`. */
export function defineTool<S extends z.ZodType, R>(tool: ChatTool<z.output<S>, R> & { parameters: S }): ChatTool<z.output<S>, R>;
export function defineTool<A = unknown, R = unknown>(tool: ChatTool<A, R>): ChatTool<A, R>;
export function defineTool(tool: ChatTool): ChatTool {
  return tool;
}

/** A tool ready for the loop: its definition for the model and its argument check. */
export interface PreparedTool {
  name: string;
  tool: ChatTool;
  definition: ChatCompletionTool;
  /** Parsed arguments, or the problems to tell the model about. */
  check(args: unknown): Promise<{ ok: true; args: unknown } | { ok: false; problems: string[] }>;
  /**
   * Runs before each call's step (an MCP tool connects to its server): what it throws ends the
   * attempt before a non-idempotent step is marked started, so a retry is no unknown outcome.
   */
  ready?(): Promise<unknown>;
}

// Draft-07 unless a schema names 2020-12. Unknown keywords are allowed: schemas written for
// model providers carry annotations ajv does not know, and describe the arguments no less well.
const drafts = { default: new Ajv({ allErrors: true, strict: false }), 2020: new Ajv2020({ allErrors: true, strict: false }) };

/**
 * Checks every tool when the agent is made, so a mistake (a bad name, an invalid schema)
 * stops the worker at start, not a run later.
 */
export function prepareTools(agent: string, tools: Record<string, ChatTool>): PreparedTool[] {
  return Object.entries(tools).map(([name, tool]) => {
    const where = `agent ${JSON.stringify(agent)}, tool ${JSON.stringify(name)}`;
    // The name becomes part of the tool's step key, so it obeys the step name pattern.
    if (!ID_PATTERN.test(name)) throw new TypeError(`${where}: the name must match ${ID_PATTERN}`);
    if (typeof tool?.execute !== 'function') throw new TypeError(`${where}: execute must be a function`);
    const { schema, check } = argumentCheck(where, tool.parameters);
    return {
      name, tool, check,
      definition: { type: 'function', function: { name, description: tool.description, parameters: schema } },
    };
  });
}

/** The schema the model sees and the check of a tool's arguments; throws a TypeError naming `where` for a schema that is not usable. */
export function argumentCheck(where: string, parameters: ChatTool['parameters']): { schema: JsonSchema; check: PreparedTool['check'] } {
  if (parameters && typeof parameters === 'object' && '_zod' in parameters) {
    const schema = parameters as z.ZodType;
    // The model writes the input side of the schema: fields with defaults are optional to it.
    const { $schema: _draft, ...json } = z.toJSONSchema(schema, { target: 'draft-7', io: 'input' }) as JsonSchema;
    return {
      schema: json,
      async check(args) {
        const r = await schema.safeParseAsync(args);
        if (r.success) return { ok: true, args: r.data };
        return { ok: false, problems: r.error.issues.map((i) => `${i.path.length ? i.path.join('.') : '(arguments)'}: ${i.message}`) };
      },
    };
  }
  if (parameters && typeof parameters === 'object' && '_def' in parameters) {
    throw new TypeError(`${where}: parameters is a zod 3 schema; use zod 4 (import { z } from 'zod') or a JSON Schema`);
  }
  if (!parameters || typeof parameters !== 'object' || Array.isArray(parameters)) {
    throw new TypeError(`${where}: parameters must be a zod schema or a JSON Schema object`);
  }
  let validate: ValidateFunction;
  try {
    const is2020 = typeof parameters.$schema === 'string' && parameters.$schema.includes('2020-12');
    validate = (is2020 ? drafts[2020] : drafts.default).compile(parameters);
  } catch (err) {
    throw new TypeError(`${where}: parameters is not a valid JSON Schema: ${(err as Error).message}`, { cause: err });
  }
  return {
    schema: parameters,
    async check(args) {
      if (validate(args)) return { ok: true, args };
      return { ok: false, problems: (validate.errors ?? []).map((e) => `${e.instancePath || '(arguments)'}: ${e.message}`) };
    },
  };
}

/** How a tool's result reads to the model. */
export function toolResultContent(result: unknown): string {
  return typeof result === 'string' ? result : JSON.stringify(result ?? null);
}

/** How a declined call reads to the model: it did not run, and why not when a reason was given. */
export function toolDeclinedContent(name: string, reason: string | undefined): string {
  return JSON.stringify(reason
    ? { error: `the user declined this call of ${name}; it did not run`, reason }
    : { error: `the user declined this call of ${name}; it did not run` });
}

/** How a refused call reads to the model: JSON, so it can tell an error from a result. */
export function toolErrorContent(message: string, problems?: string[]): string {
  return JSON.stringify(problems?.length ? { error: message, problems } : { error: message });
}
