import type { Answer } from './transport.ts';

/** An answer of the API other than 2xx: its status and Baton's stable error code. */
export class BatonApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: { path: string; message: string }[] = [],
  ) {
    super(message);
    this.name = 'BatonApiError';
  }
}

/** stream() could not reach the API for `maxReconnects` attempts in a row. */
export class BatonStreamError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'BatonStreamError';
  }
}

/** The error of an answer other than 2xx: Baton's JSON error when it is one, else its status and text. */
export async function apiError(res: Answer): Promise<BatonApiError> {
  const text = await res.text().catch(() => '');
  try {
    const body = JSON.parse(text) as { error?: { code?: string; message?: string; details?: { path: string; message: string }[] } };
    if (body.error?.code) return new BatonApiError(res.status, body.error.code, body.error.message ?? text, body.error.details);
  } catch {
    // Not Baton's JSON error (a proxy's page, say): keep the status and the text.
  }
  return new BatonApiError(res.status, `HTTP_${res.status}`, text.slice(0, 500) || `HTTP ${res.status}`);
}
