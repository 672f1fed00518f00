import { z } from 'zod';
import { RESERVED_METADATA } from '../lib/openai-compat/responses.ts';
import { MAX_CONTENT_CHARS } from './schemas.ts';

/**
 * Requests of the OpenAI-compatible API (routes-openai.ts), as OpenAI documents them
 * (https://platform.openai.com/docs/api-reference/responses/create), cut to what Baton
 * supports. A field Baton does not support is refused by its name, never ignored:
 * `Unsupported parameter: 'temperature'` with `param: "temperature"`.
 */

/** Paths of the OpenAI-compatible API: app.ts mounts them with OpenAI's error shape. */
export const OPENAI_PATHS = ['/v1/responses', '/v1/chat/completions'];

/** Whether `path` (Express syntax) is one of the OpenAI-compatible API's. */
export const isOpenAiPath = (path: string) => OPENAI_PATHS.some((p) => path === p || path.startsWith(`${p}/`));

/** OpenAI's error answer. */
export const openAiErrorResponse = z.object({
  error: z.object({ message: z.string(), type: z.string(), param: z.string().nullable(), code: z.string().nullable() }),
});

/** The start of the message of every refusal of a field Baton does not support (openai-errors.ts gives it its code). */
export const UNSUPPORTED = 'Unsupported parameter';

/** An object of `shape` whose other keys are each refused by name. */
function supportedOnly<S extends z.ZodRawShape>(shape: S, why: string) {
  return z.object(shape).catchall(z.unknown()).superRefine((value, ctx) => {
    for (const key of Object.keys(value)) {
      if (!(key in shape)) ctx.addIssue({ code: 'custom', path: [key], message: `${UNSUPPORTED}: '${key}' ${why}` });
    }
  });
}

const text = z.string().min(1).max(MAX_CONTENT_CHARS);

const inputMessage = supportedOnly({
  type: z.literal('message').optional(),
  role: z.enum(['user', 'system', 'developer']).describe('assistant turns come from the conversation Baton keeps: continue it with previous_response_id'),
  content: z.union([text, z.array(supportedOnly({ type: z.literal('input_text'), text: z.string().max(MAX_CONTENT_CHARS) }, 'in a text part')).min(1).max(64)]),
}, 'in an input message');

/** OpenAI's metadata: at most 16 string pairs, keys up to 64 characters, values up to 512. */
const metadata = z.record(z.string().max(64), z.string().max(512))
  .refine((m) => Object.keys(m).length <= 16, 'at most 16 keys')
  .superRefine((m, ctx) => {
    for (const k of RESERVED_METADATA) {
      if (k in m) ctx.addIssue({ code: 'custom', path: [k], message: `'${k}' is a metadata key Baton keeps for itself` });
    }
  });

const model = z.string().min(1).max(128).describe('an agent, or an upstream model name OPENAI_COMPAT_MODELS maps to one');

/** The output of a function call the previous response asked for (with previous_response_id). */
const functionCallOutput = supportedOnly({
  type: z.literal('function_call_output'),
  call_id: z.string().min(1).max(128),
  output: z.string().max(MAX_CONTENT_CHARS),
}, 'in a function_call_output');

/** A function tool the client runs itself: the response ends with its calls. */
const functionTool = supportedOnly({
  type: z.literal('function'),
  name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'letters, digits, _ and -, 1-64 characters'),
  description: z.string().max(4096).nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
}, 'in a function tool');

export const responsesBody = supportedOnly({
  model,
  input: z.union([text, z.array(z.union([inputMessage, functionCallOutput])).min(1).max(64)]),
  tools: z.array(functionTool).max(64).nullish().describe('function tools only: the client runs them'),
  tool_choice: z.literal('auto').nullish().describe('only auto'),
  instructions: z.string().max(MAX_CONTENT_CHARS).nullish(),
  previous_response_id: z.string().max(128).nullish(),
  metadata: metadata.nullish(),
  max_output_tokens: z.number().int().min(1).max(1_000_000).nullish(),
  store: z.boolean().nullish().refine((s) => s !== false, 'Baton stores every response (its run): store: false cannot be honoured'),
  background: z.boolean().nullish(),
  stream: z.boolean().nullish(),
}, 'is not supported by Baton').superRefine((b, ctx) => {
  if (typeof b.input === 'string') return;
  const users = b.input.some((m) => 'role' in m && m.role === 'user');
  const outputs = b.input.some((m) => m.type === 'function_call_output');
  if (!users && !outputs) ctx.addIssue({ code: 'custom', path: ['input'], message: 'the input needs a user message or function call outputs' });
  // The outputs answer the previous response's calls; a question of the user's comes in the next response.
  if (users && outputs) ctx.addIssue({ code: 'custom', path: ['input'], message: 'send function call outputs without a user message' });
  if (outputs && !b.previous_response_id) {
    ctx.addIssue({ code: 'custom', path: ['previous_response_id'], message: 'function call outputs answer the calls of a previous response' });
  }
});

export const responseParams = z.strictObject({ responseId: z.string().min(1).max(256) });

export const retrieveQuery = supportedOnly({
  stream: z.enum(['true', 'false']).optional(),
  starting_after: z.coerce.number().int().min(-1).optional().describe('with stream=true: the sequence number of the last event the reader has'),
}, 'is not supported by Baton');

/** A sampling setting Baton does not pass on, accepted only at OpenAI's default (which changes nothing). */
const atDefault = (value: number) => z.number().nullish().refine((v) => v === null || v === undefined || v === value, {
  message: `${UNSUPPORTED}: Baton sends no sampling settings to the model; only ${value} (the default) is accepted`,
});

const chatContent = z.union([z.string().max(MAX_CONTENT_CHARS), z.array(supportedOnly({ type: z.literal('text'), text: z.string().max(MAX_CONTENT_CHARS) }, 'in a text part')).max(64)]);

/** A call of a function tool an assistant message made (the client ran it: a tool message answers it). */
const chatToolCall = supportedOnly({
  id: z.string().min(1).max(128),
  type: z.literal('function'),
  function: supportedOnly({
    name: z.string().min(1).max(64), arguments: z.string().max(MAX_CONTENT_CHARS),
    parsed_arguments: z.unknown().optional().describe("the openai package's parse of the arguments, sent back with the message: not read (OpenAI accepts and ignores it too)"),
  }, 'in a function call'),
}, 'in a tool call');

const chatMessage = z.discriminatedUnion('role', [
  supportedOnly({ role: z.enum(['system', 'developer', 'user']), content: chatContent, name: z.string().max(64).optional() }, 'in a chat message'),
  supportedOnly({
    role: z.literal('assistant'),
    content: chatContent.nullish().describe('null when the message only calls tools'),
    // A completion's message sent back as it came (the SDKs' usual way) has `refusal: null`, and
    // from the openai package's parse helpers and runTools `parsed` (and tool calls' `parsed_arguments`).
    refusal: z.null().optional().describe('null: Baton sends the model no refusals'),
    parsed: z.unknown().optional().describe("the openai package's parse of the content, sent back with the message: not read (OpenAI accepts and ignores it too)"),
    name: z.string().max(64).optional(),
    tool_calls: z.array(chatToolCall).min(1).max(64).optional(),
  }, 'in an assistant message').superRefine((m, ctx) => {
    if (m.content == null && !m.tool_calls) ctx.addIssue({ code: 'custom', path: ['content'], message: 'an assistant message needs content or tool_calls' });
  }),
  supportedOnly({ role: z.literal('tool'), content: chatContent, tool_call_id: z.string().min(1).max(128) }, 'in a tool message'),
]);

/** A function tool the client runs itself, as Chat Completions nests it: the completion ends with its calls. */
const chatTool = supportedOnly({
  type: z.literal('function', { error: `${UNSUPPORTED}: only function tools are supported by Baton` }),
  function: supportedOnly({
    name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'letters, digits, _ and -, 1-64 characters'),
    description: z.string().max(4096).nullish(),
    parameters: z.record(z.string(), z.unknown()).nullish(),
    strict: z.boolean().nullish(),
  }, 'in a function tool'),
}, 'in a tool');

/** POST /v1/chat/completions (https://platform.openai.com/docs/api-reference/chat/create), what Baton supports of it. */
export const chatBody = supportedOnly({
  model,
  messages: z.array(chatMessage).min(1).max(256),
  tools: z.array(chatTool).max(64).nullish().describe('function tools only: the client runs them'),
  tool_choice: z.enum(['auto', 'none'], { error: `${UNSUPPORTED}: tool_choice is 'auto' or 'none' on Baton` }).nullish()
    .describe('auto, or none: the model is called without the tools'),
  parallel_tool_calls: z.boolean().nullish().refine((p) => p !== false, `${UNSUPPORTED}: the model may call several tools in one turn; only true (the default) is accepted`),
  stream: z.boolean().nullish(),
  stream_options: supportedOnly({ include_usage: z.boolean().nullish() }, 'in stream_options').nullish(),
  max_tokens: z.number().int().min(1).max(1_000_000).nullish(),
  max_completion_tokens: z.number().int().min(1).max(1_000_000).nullish(),
  metadata: metadata.nullish(),
  n: atDefault(1),
  top_p: atDefault(1),
  frequency_penalty: atDefault(0),
  presence_penalty: atDefault(0),
}, 'is not supported by Baton');
