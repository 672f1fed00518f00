import { Redis } from 'ioredis';
import { defineAgent } from '../src/lib/sdk/agent.ts';

/**
 * The resume-latency bench's agent (`bench/waits-resume.ts`), loaded in-process or by a
 * `baton worker --agents bench/waits-agent.ts` child. It waits for `go`; the moment its
 * waitFor returns (epoch ms with a fraction, comparable across processes on one machine)
 * goes to Redis, where the bench reads it.
 */
let conn: Redis | undefined;

export const continuedKey = (prefix: string, runId: string) => `${prefix}:bench:continued:${runId}`;

export const benchWait = defineAgent({
  name: 'bench-wait',
  async run(ctx) {
    const value = await ctx.waitFor<string>('go');
    const at = performance.timeOrigin + performance.now();
    conn ??= new Redis(process.env.REDIS_URL ?? '', { maxRetriesPerRequest: 2 });
    await conn.set(continuedKey(process.env.BATON_KEY_PREFIX ?? '', ctx.runId), String(at));
    return `went on with ${value}`;
  },
});

/** Closes this module's connection (the in-process bench calls it at the end). */
export async function closeBenchWaitRedis(): Promise<void> {
  const c = conn;
  conn = undefined;
  await c?.quit().catch(() => c.disconnect());
}
