import { describe, expect, it } from 'vitest';
import { runtimeCounts } from '../src/lib/tenancy/runtime-counts.ts';

describe('runtimeCounts', () => {
  it('counts what moved into a status less what moved out, terminal statuses cumulative', () => {
    const counts = runtimeCounts({
      dispatched: '5', 'dispatched>running': '4', 'running>succeeded': '2', 'running>retrying': '1',
      'retrying>dispatched': '1', 'running>waiting': '1', 'wait:input': '1', queued: '2', 'queued>dispatched': '1',
    });
    expect(counts).toMatchObject({
      queued: 1, dispatched: 3, running: 0, retrying: 0, waiting: 1, succeeded: 2, failed: 0,
    });
  });

  it('adds the counts kept per status before moves were counted', () => {
    expect(runtimeCounts({ running: '2', succeeded: '7', 'running>succeeded': '1', dispatched: '1', 'dispatched>running': '1' }))
      .toMatchObject({ running: 2, succeeded: 8, dispatched: 0 });
  });

  it('never goes below zero and ignores fields that are no counts', () => {
    expect(runtimeCounts({ 'running>failed': '3', 'x>y': '9', junk: 'abc' })).toMatchObject({ running: 0, failed: 3 });
  });
});
