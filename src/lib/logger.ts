import { pino, type Logger, type DestinationStream } from 'pino';

export type { Logger };

/**
 * JSON logs. Authorization headers and key material are redacted wherever they appear,
 * so a request log can never leak an API key.
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid },
      redact: {
        paths: ['req.headers.authorization', 'headers.authorization', 'authorization', 'apiKey', 'key'],
        censor: '[redacted]',
      },
    },
    destination,
  );
}
