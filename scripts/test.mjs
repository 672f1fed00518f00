// `npm test`: the static checks (types, lint, imports, the Lua library, clock asserts, hop
// budgets) and the quick test files, at once rather than one after the other. The test files
// mostly wait on processes, sockets and leases, so the two cores have room for the checks
// beside them: the checks' minute no longer comes before the first test starts.
//
// The checks run one after another, their output held; the test files print as they go. A check
// that fails prints its output at once (so a type error shows within seconds), the test files
// go on to their end (stopped halfway, their processes and redis-servers would be left behind),
// and the run fails. At the end, one line a check (with a failed one's output, and a check's
// notice that it skipped a part for a missing program), then the verdict.
//
// Usage: node scripts/test.mjs [vitest arguments...] (npm test -- test/foo.test.ts runs one file)
import { spawn } from 'node:child_process';

const CHECKS = ['typecheck', 'lint', 'check:imports', 'check:lua', 'check:clock', 'check:architecture'];

/** Runs `command args` to its end: its exit code (1 for a signal) and, if held, its output. */
function run(command, args, { hold }) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: hold ? ['ignore', 'pipe', 'pipe'] : 'inherit' });
    let output = '';
    if (hold) {
      child.stdout.on('data', (b) => { output += b; });
      child.stderr.on('data', (b) => { output += b; });
    }
    child.once('error', (err) => resolve({ code: 1, output: `${output}${err.message}\n` }));
    child.once('close', (code) => resolve({ code: code ?? 1, output }));
  });
}

const checks = (async () => {
  const done = [];
  for (const name of CHECKS) {
    const started = Date.now();
    const { code, output } = await run('npm', ['run', '--silent', name], { hold: true });
    done.push({ name, code, output, seconds: (Date.now() - started) / 1000 });
    if (code !== 0) {
      process.stdout.write(`\nnpm test: npm run ${name} failed (exit ${code}); the test files go on, and the run fails:\n${output}\n`);
      break;
    }
  }
  return done;
})();

const tests = run('npx', ['vitest', 'run', '--project', 'quick', ...process.argv.slice(2)], { hold: false });

const [done, vitest] = await Promise.all([checks, tests]);
// One line a check; a failed check's output again, and a skip notice (a missing program) as said.
process.stdout.write('\nnpm test: the static checks, run beside the test files\n');
for (const c of done) {
  process.stdout.write(`  npm run ${c.name}: ${c.code === 0 ? 'passed' : `FAILED (exit ${c.code})`} in ${c.seconds.toFixed(1)} s\n`);
  const shown = c.code === 0 ? c.output.split('\n').filter((l) => l.includes('SKIPPED')).join('\n') : c.output.trimEnd();
  if (shown) process.stdout.write(`${shown}\n`);
}
const checksFailed = done.some((c) => c.code !== 0);
const notRun = CHECKS.slice(done.length);
if (notRun.length) process.stdout.write(`not run after the failure: ${notRun.join(', ')}\n`);
process.stdout.write(`npm test: static checks ${checksFailed ? 'FAILED' : 'passed'}; test files ${vitest.code === 0 ? 'passed' : `FAILED (vitest exit ${vitest.code})`}\n`);
process.exit(checksFailed || vitest.code !== 0 ? 1 : 0);
