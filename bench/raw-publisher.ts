import { Redis } from 'ioredis';
import { wallMs } from './bench-agents.ts';

/**
 * The raw pub/sub side of the stream latency rows whose readers run in another process:
 * `runs` channels `raw-<tag>-<i>`, each PUBLISHed the emit time every `intervalMs`,
 * `tokens` times, like bench-streamer does for Baton. Started by bench/streams.ts (which
 * has subscribed first); prints `ready`, publishes, exits.
 *   node --import tsx bench/raw-publisher.ts <redisUrl> <tag> <runs> <tokens> <intervalMs>
 */
const [url, tag, runs, tokens, interval] = process.argv.slice(2);
const pub = new Redis(url);
await pub.ping();
console.log('ready');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
await Promise.all(Array.from({ length: Number(runs) }, async (_, ch) => {
  const start = wallMs();
  for (let i = 0; i < Number(tokens); i++) {
    const due = start + i * Number(interval);
    if (due > wallMs()) await sleep(due - wallMs());
    void pub.publish(`raw-${tag}-${ch}`, wallMs().toFixed(3));
  }
}));
await pub.quit();
