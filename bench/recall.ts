import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { createKeys } from '../src/lib/keys.ts';
import { createLogger } from '../src/lib/logger.ts';
import { createRedis, waitReady } from '../src/lib/redis/redis.ts';
import type { HistoryMessage } from '../src/lib/sessions/memory-session.ts';
import { SessionRecall, vectorSpace } from '../src/lib/sessions/recall.ts';
import { resolveRecallOptions } from '../src/lib/sessions/recall-options.ts';
import { encodeVector, unitVector } from '../src/lib/sessions/vectors.ts';
import { percentile, withBenchRedis } from './redis-stats.ts';

/**
 * `node --import tsx bench/recall.ts`: the cost of one exact recall (read every stored vector
 * of the session in one HMGET, decode, score, rank) at 1,000 and 10,000 turns, for 1536
 * dimensions (text-embedding-3-small's default) and 256 (its `dimensions: 256`). The
 * embedder answers at once, so the figure is Baton's part only; every turn already has its
 * vector, as it does from the second run of a session on. RECALL_BENCH_REPEATS sets the
 * recalls per size (default 20). Uses REDIS_URL when set, else a redis-server of its own.
 */
const REPEATS = Number(process.env.RECALL_BENCH_REPEATS ?? 20);
const SIZES = [1_000, 10_000];
const DIMENSIONS = [1536, 256];

function randomVector(dims: number): number[] {
  return Array.from({ length: dims }, () => Math.random() * 2 - 1);
}

async function main(redisUrl: string): Promise<void> {
  const redis = createRedis({ url: redisUrl, name: 'bench-recall' });
  await waitReady(redis);
  const keys = createKeys(`bench-recall-${process.pid}`);
  const log = createLogger('silent');
  console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model ?? 'unknown'}), node ${process.version}; ${REPEATS} recalls per row`);
  const rows: Record<string, Record<string, number>> = {};
  try {
    for (const dims of DIMENSIONS) {
      for (const turns of SIZES) {
        const sessionId = `s${dims}-${turns}`;
        const query = randomVector(dims);
        const embed = Object.assign(async (texts: string[]) => texts.map(() => query), { id: `bench-${dims}` });
        const key = keys.scope('bench').turnVectors(sessionId, vectorSpace(embed));
        const history: HistoryMessage[] = [];
        for (let i = 0; i < turns; i++) {
          const runId = `r${i}`;
          history.push({ role: 'user', content: `question ${i}`, runId }, { role: 'assistant', content: `answer ${i}`, runId });
        }
        for (let i = 0; i < turns; i += 500) {
          const pipe = redis.pipeline();
          for (let j = i; j < Math.min(turns, i + 500); j++) pipe.hset(key, `r${j}`, encodeVector(unitVector(randomVector(dims))));
          await pipe.exec();
        }
        // The recent window holds the last two turns, as redisMemory({ window: { maxMessages: 4 } }) would.
        const window = history.slice(-4);
        const recall = new SessionRecall(redis, key, resolveRecallOptions({ embed, minScore: -1, maxTurns: 5 }), log);
        await recall.recall(history, window, 'warm up', 'rnew');
        const ms: number[] = [];
        for (let r = 0; r < REPEATS; r++) {
          const t0 = performance.now();
          const found = await recall.recall(history, window, 'the new question', 'rnew');
          ms.push(performance.now() - t0);
          if (found.length !== 5) throw new Error(`expected 5 recalled turns, got ${found.length}`);
        }
        // The same read alone, to tell Redis and the transfer from the scoring.
        const ids = history.filter((m) => m.role === 'user').map((m) => m.runId!);
        const readMs: number[] = [];
        for (let r = 0; r < REPEATS; r++) {
          const t0 = performance.now();
          await redis.hmgetBuffer(key, ...ids);
          readMs.push(performance.now() - t0);
        }
        ms.sort((a, b) => a - b);
        readMs.sort((a, b) => a - b);
        rows[`${turns} turns × ${dims} dims`] = {
          'vectors read (MB)': Number(((turns * dims * 4) / 1e6).toFixed(1)),
          'p50 ms/recall': Number(percentile(ms, 50).toFixed(1)),
          'p95 ms/recall': Number(percentile(ms, 95).toFixed(1)),
          'p50 ms of it the HMGET alone': Number(percentile(readMs, 50).toFixed(1)),
        };
        await redis.del(key);
      }
    }
  } finally {
    await redis.quit();
  }
  console.log('\nexact recall (HMGET of every turn vector, cosine, top 5)');
  console.table(rows);
}

await withBenchRedis(main);
