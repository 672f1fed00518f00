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

export const responsesBody = supportedOnly({
  model: z.string().min(1).max(128).describe('an agent, or an upstream model name OPENAI_COMPAT_MODELS maps to one'),
  input: z.union([text, z.array(inputMessage).min(1).max(64)]),
  instructions: z.string().max(MAX_CONTENT_CHARS).nullish(),
  previous_response_id: z.string().max(128).nullish(),
  metadata: metadata.nullish(),
  max_output_tokens: z.number().int().min(1).max(1_000_000).nullish(),
  store: z.boolean().nullish().refine((s) => s !== false, 'Baton stores every response (its run): store: false cannot be honoured'),
  background: z.boolean().nullish(),
  stream: z.boolean().nullish(),
}, 'is not supported by Baton').superRefine((b, ctx) => {
  if (typeof b.input !== 'string' && !b.input.some((m) => m.role === 'user')) {
    ctx.addIssue({ code: 'custom', path: ['input'], message: 'the input needs a user message' });
  }
});

export const responseParams = z.strictObject({ responseId: z.string().min(1).max(256) });

export const retrieveQuery = supportedOnly({
  stream: z.enum(['true', 'false']).optional(),
  starting_after: z.coerce.number().int().min(-1).optional().describe('with stream=true: the sequence number of the last event the reader has'),
}, 'is not supported by Baton');
