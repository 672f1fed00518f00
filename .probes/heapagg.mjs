import { readFileSync } from 'node:fs';
function agg(file) {
  const s = JSON.parse(readFileSync(file, 'utf8'));
  const f = s.snapshot.meta.node_fields; const n = f.length;
  const types = s.snapshot.meta.node_types[0];
  const ti = f.indexOf('type'), ni = f.indexOf('name'), si = f.indexOf('self_size');
  const out = new Map();
  for (let i = 0; i < s.nodes.length; i += n) {
    const t = types[s.nodes[i + ti]]; const name = t === 'object' || t === 'closure' ? s.strings[s.nodes[i + ni]] : `(${t})`;
    const e = out.get(name) ?? [0, 0]; e[0]++; e[1] += s.nodes[i + si]; out.set(name, e);
  }
  return out;
}
const [a, b] = process.argv.slice(2).map(agg);
const rows = [];
for (const [k, [c, sz]] of b) { const [c0, s0] = a.get(k) ?? [0, 0]; rows.push([k, c - c0, sz - s0]); }
rows.sort((x, y) => y[2] - x[2]);
let tot = 0; for (const r of rows) tot += r[2];
console.log('total delta KiB', (tot/1024).toFixed(0));
for (const r of rows.slice(0, 45)) console.log(String(r[1]).padStart(7), (r[2]/1024).toFixed(0).padStart(7), 'KiB', r[0].slice(0, 80));
