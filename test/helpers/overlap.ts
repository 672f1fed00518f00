/** A run's time holding a worker, as the API shows it. */
export interface RunSpan { startedAt: string; finishedAt: string }

/** Largest number of runs whose [startedAt, finishedAt) intervals overlap. */
export function maxOverlap(runs: readonly RunSpan[]): number {
  const points = runs.flatMap((r) => [[Date.parse(r.startedAt), 1], [Date.parse(r.finishedAt), -1]] as [number, number][]);
  // At equal times the finish counts first: a slot freed and reused in the same millisecond is no overlap.
  points.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let cur = 0;
  let max = 0;
  for (const [, d] of points) max = Math.max(max, (cur += d));
  return max;
}
