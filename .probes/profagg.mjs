import { readFileSync } from 'node:fs';
const p = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const byId = new Map(p.nodes.map((n) => [n.id, n]));
const self = new Map();
const dt = p.timeDeltas; let total = 0;
const counts = new Map();
for (let i = 0; i < p.samples.length; i++) { counts.set(p.samples[i], (counts.get(p.samples[i]) ?? 0) + (dt[i] ?? 0)); total += dt[i] ?? 0; }
const bucket = (n) => {
  const u = n.callFrame.url || '';
  const m = u.match(/node_modules\/((@[^/]+\/)?[^/]+)/);
  if (m) return m[1];
  if (u.includes('/src/')) return 'src/' + u.split('/src/')[1];
  if (u.includes('/bench/')) return 'bench';
  if (u.startsWith('node:')) return u;
  return n.callFrame.functionName ? `(${n.callFrame.functionName})` : '(native)';
};
const pkg = new Map(), fn = new Map();
for (const [id, t] of counts) { const n = byId.get(id); const b = bucket(n); pkg.set(b, (pkg.get(b) ?? 0) + t); const f = `${n.callFrame.functionName || '(anon)'} ${b}:${n.callFrame.lineNumber}`; fn.set(f, (fn.get(f) ?? 0) + t); }
const show = (m, k) => [...m].sort((a, b) => b[1] - a[1]).slice(0, k).forEach(([n, t]) => console.log((100 * t / total).toFixed(1).padStart(5) + '%', n));
console.log('total ms', (total / 1000).toFixed(0)); show(pkg, 30); console.log('---'); show(fn, 40);
