const v8 = require('node:v8');
const fs = require('node:fs');
process.on('SIGUSR2', () => {
  const spaces = Object.fromEntries(v8.getHeapSpaceStatistics().map((s) => [s.space_name, { size: (s.space_size/1048576).toFixed(1), used: (s.space_used_size/1048576).toFixed(1) }]));
  const m = process.memoryUsage();
  const mib = Object.fromEntries(Object.entries(m).map(([k, v]) => [k, (v/1048576).toFixed(1)]));
  fs.appendFileSync(`/tmp/mem-${process.pid}.txt`, JSON.stringify({ mib, spaces }) + '\n');
});
process.on('SIGUSR1', () => { v8.writeHeapSnapshot(`/tmp/heap-${process.pid}-${Date.now()}.heapsnapshot`); fs.appendFileSync(`/tmp/mem-${process.pid}.txt`, 'snap\n'); });
