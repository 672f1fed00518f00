import { benchBaton } from '../bench/e2e.ts';
const r = await benchBaton('redis://127.0.0.1:6379', { runs: Number(process.env.RUNS ?? 6000), warmup: 500, concurrency: 50, viaHttp: process.env.HTTP === '1' });
console.log(JSON.stringify(r));
process.exit(0);
