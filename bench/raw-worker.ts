import { Worker } from 'bullmq';
import { Redis } from 'ioredis';

/**
 * The raw side of the time-to-first-token rows: a bare BullMQ worker in a process of its
 * own (as Baton's worker is) that PUBLISHes a token on the channel its job names, the
 * least a queue-backed agent can do to stream its first token. Started by
 * bench/first-token.ts; prints `ready` once it takes jobs; stops on SIGTERM.
 *   node --import tsx bench/raw-worker.ts <redisUrl> <queue> <concurrency>
 */
const [url, queue, concurrency] = process.argv.slice(2);
const conn = new Redis(url, { maxRetriesPerRequest: null });
const pub = new Redis(url);
const worker = new Worker<{ channel: string }>(queue, async (job) => {
  await pub.publish(job.data.channel, 'token');
}, { connection: conn, prefix: 'bench', concurrency: Number(concurrency) });
await worker.waitUntilReady();
console.log('ready');
process.once('SIGTERM', () => {
  void worker.close().then(() => Promise.all([conn.quit(), pub.quit()])).then(() => process.exit(0));
});
