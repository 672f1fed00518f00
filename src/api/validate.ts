import type { z } from 'zod';
import { BatonError, type ErrorDetail } from '../lib/errors.ts';

/** Parses one part of a request; a failure is a 400 naming each failing field (`body.input.content`). */
export function parse<S extends z.ZodType>(schema: S, value: unknown, where: 'body' | 'params' | 'query' | 'headers'): z.output<S> {
  const result = schema.safeParse(value ?? {});
  if (result.success) return result.data;
  const details: ErrorDetail[] = result.error.issues.map((i) => ({
    path: [where, ...i.path.map(String)].join('.'),
    message: i.message,
  }));
  throw new BatonError('VALIDATION_FAILED', undefined, details);
}
