import http from 'node:http';
const [port, pid] = process.argv.slice(2).map(Number);
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
process.kill(pid, 'SIGUSR1'); await new Promise((r) => setTimeout(r, 3000));
let n = 0;
await new Promise((resolve) => { for (let i = 0; i < 1000; i++) http.get({ port, path: `/s/${i}`, agent, headers: { authorization: 'Bearer x' } }, (r) => r.once('data', () => { if (++n === 1000) resolve(); })); });
await new Promise((r) => setTimeout(r, 1000));
process.kill(pid, 'SIGUSR1'); await new Promise((r) => setTimeout(r, 4000));
process.exit(0);
