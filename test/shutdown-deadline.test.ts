import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BIN, waitFor } from './helpers/harness.ts';
import { track } from './helpers/resources.ts';

/**
 * A shutdown cannot hang for ever. `baton start` spawns its own redis-server, in a process
 * group of its own (a terminal's Ctrl-C reaches Baton only, which stops that server after
 * the API and the worker); when the server stops answering while Baton shuts down (here:
 * frozen with SIGSTOP), closing the connections waits on it. The shutdown gives up after
 * SHUTDOWN_GRACE_MS + 10 s and the process exits, instead of living on with whatever holds
 * its output (the package smoke test once waited on such a process until CI's time ran out).
 */
function childrenOf(pid: number): { pid: number; comm: string }[] {
  const out: { pid: number; comm: string }[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try { stat = readFileSync(`/proc/${entry}/stat`, 'utf8'); } catch { continue; }
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === pid) out.push({ pid: Number(entry), comm });
  }
  return out;
}

describe('shutdown', () => {
  it('baton start exits within SHUTDOWN_GRACE_MS + 10 s when its redis-server stops answering', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'baton-shutdown-'));
    const env: Record<string, string | undefined> = { ...process.env, PORT: '0', METRICS_PORT: '0', LOG_LEVEL: 'info', SHUTDOWN_GRACE_MS: '500' };
    delete env.REDIS_URL;
    const child = spawn(process.execPath, [BIN, 'start'], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let redisPid: number | undefined;
    track(child, async () => {
      if (redisPid) { try { process.kill(redisPid, 'SIGKILL'); } catch { /* gone */ } }
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      rmSync(cwd, { recursive: true, force: true });
    });
    let out = '';
    child.stdout.on('data', (b) => { out += b; });
    child.stderr.on('data', (b) => { out += b; });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    await waitFor(() => out.includes('baton is up'), 30_000, `baton start to come up:\n${out}`);
    const redis = childrenOf(child.pid!).find((c) => c.comm === 'redis-server');
    expect(redis, 'baton start spawned a redis-server').toBeDefined();
    redisPid = redis!.pid;

    // Frozen, not gone: connections stay open and every command waits.
    process.kill(redisPid, 'SIGSTOP');
    child.kill('SIGTERM');
    const code = await Promise.race([exited, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 40_000))]);
    process.kill(redisPid, 'SIGCONT');
    expect(code, out).toBe(1);
    expect(out).toContain('shutdown did not finish in time');
  }, 60_000);
});
