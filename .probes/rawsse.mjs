import http from 'node:http';
import { readFileSync } from 'node:fs';
const rss = () => (Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/self/status`, 'utf8'))[1]) / 1024).toFixed(1);
const srv = http.createServer((req, res) => { res.writeHead(200, { 'content-type': 'text/event-stream' }); res.write('retry: 1000\n\n'); setInterval(() => res.write(':k\n\n'), 15000); });
srv.listen(0, async () => {
  const port = srv.address().port;
  await new Promise((r) => setTimeout(r, 500));
  console.log('idle', rss(), JSON.stringify(Object.fromEntries(Object.entries(process.memoryUsage()).map(([k,v])=>[k,(v/1048576).toFixed(1)]))));
  const N = 1000; let n = 0;
  await new Promise((resolve) => { for (let i = 0; i < N; i++) http.get({ port, agent: false }, (r) => { r.once('data', () => { if (++n === N) resolve(); }); }); });
  await new Promise((r) => setTimeout(r, 1000));
  console.log('connected (client+server in one process)', rss(), JSON.stringify(Object.fromEntries(Object.entries(process.memoryUsage()).map(([k,v])=>[k,(v/1048576).toFixed(1)]))));
  process.exit(0);
});
