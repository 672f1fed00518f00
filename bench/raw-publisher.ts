import { Redis } from 'ioredis';
import { clockMs } from './bench-agents.ts';

/**
 * The raw side of the stream rows whose readers run in another process: `runs` channels
 * `raw-<tag>-<i>`, each PUBLISHed the emit time every `intervalMs`, `tokens` times, like
 * bench-streamer does for Baton. Started by bench/streams.ts and bench/llm-streams.ts (which
 * have subscribed first); prints `ready`, publishes, exits.
 *   node --import tsx bench/raw-publisher.ts <redisUrl> <tag> <runs> <tokens> <intervalMs> [<options JSON>]
 * Options (all off by default, as bench/streams.ts uses it):
 *   xadd: each token is also XADDed to the stream `rawlog-<tag>-<i>` (field `t`), the XADD and
 *     the PUBLISH pipelined, one round trip per token awaited before the next: the least a
 *     lossless, resumable stream costs Redis (a log to resume from, a notification to wake readers).
 *   onSignal: wait for SIGUSR1 before the first token, so the bench can start measuring Redis
 *     once this process has started (tsx compiles for seconds on a busy machine).
 *   spread: channel i starts i × intervalMs / runs later, so the channels' tokens are spread
 *     over the interval as independent model streams are, not all sent in the same millisecond.
 * With onSignal, prints `done <cpu µs>` once every reply is in: this process's CPU time
 * (user + system, all threads) from the signal to then.
 */
const [url, tag, runsArg, tokensArg, intervalArg, optionsArg] = process.argv.slice(2);
const runs = Number(runsArg);
const tokens = Number(tokensArg);
const interval = Number(intervalArg);
const options = optionsArg ? (JSON.parse(optionsArg) as { xadd?: boolean; onSignal?: boolean; spread?: boolean }) : {};

const pub = new Redis(url);
await pub.ping();
const go = options.onSignal ? new Promise((r) => process.once('SIGUSR1', r)) : undefined;
console.log('ready');
await go;
const cpu0 = process.cpuUsage();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const t0 = clockMs();
await Promise.all(Array.from({ length: runs }, async (_, ch) => {
  const start = t0 + (options.spread ? (ch * interval) / runs : 0);
  const channel = `raw-${tag}-${ch}`;
  const log = `rawlog-${tag}-${ch}`;
  for (let i = 0; i < tokens; i++) {
    const due = start + i * interval;
    if (due > clockMs()) await sleep(due - clockMs());
    const stamp = clockMs().toFixed(3);
    if (!options.xadd) {
      void pub.publish(channel, stamp);
      continue;
    }
    const replies = await pub.pipeline().xadd(log, '*', 't', stamp).publish(channel, stamp).exec();
    const failed = replies?.find(([err]) => err);
    if (!replies || failed) throw new Error(`XADD + PUBLISH to ${log} failed: ${failed?.[0]?.message ?? 'no reply'}`);
  }
}));
if (options.onSignal) {
  const used = process.cpuUsage(cpu0);
  console.log(`done ${used.user + used.system}`);
}
await pub.quit();
