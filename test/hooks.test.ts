import { describe, expect, it } from 'vitest';
import { composeHooks } from '../src/lib/hooks.ts';

interface Events {
  started?(run: string): void;
  finished?(run: string, status: string): void;
  modelUsage?(run: string, calls: number): void;
}

describe('composeHooks', () => {
  it('calls every listener that has a method, in order, including methods only one of them has', () => {
    const seen: string[] = [];
    const metrics: Events = {
      started: (run) => seen.push(`metrics started ${run}`),
      modelUsage: (run, calls) => seen.push(`metrics usage ${run} ${calls}`),
    };
    const test: Events = {
      started: (run) => seen.push(`test started ${run}`),
      finished: (run, status) => seen.push(`test finished ${run} ${status}`),
    };
    const both = composeHooks<Events>(metrics, undefined, test);
    both.started?.('r1');
    both.modelUsage?.('r1', 2);
    both.finished?.('r1', 'succeeded');
    expect(seen).toEqual(['metrics started r1', 'test started r1', 'metrics usage r1 2', 'test finished r1 succeeded']);
  });

  it('returns a lone listener as it is, and calls a class instance\'s methods with it as `this`', () => {
    class Counter implements Events {
      n = 0;
      started(): void { this.n++; }
    }
    const only = new Counter();
    expect(composeHooks<Events>(only, undefined)).toBe(only);
    const other = new Counter();
    const both = composeHooks<Events>(only, other);
    both.started?.('r');
    expect([only.n, other.n]).toEqual([1, 1]);
    expect(both.finished).toBeUndefined();
  });
});
