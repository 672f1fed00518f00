/**
 * Prints rows as a Markdown table with padded columns: readable in a terminal, and
 * pasted into docs/benchmarks.md as it is. (console.table quotes every string, and half the cells
 * here are strings: "n/a (why)", "≤ 64", "0.33×".)
 */
export type Cell = string | number | undefined;

export function printTable(title: string, rows: Record<string, Record<string, Cell>>): void {
  const labels = Object.keys(rows);
  const columns = [...new Set(labels.flatMap((l) => Object.keys(rows[l])))];
  const text = (c: Cell) => (c === undefined ? '' : String(c));
  const grid = [[title, ...columns], ...labels.map((l) => [l, ...columns.map((c) => text(rows[l][c]))])];
  const widths = grid[0].map((_, i) => Math.max(3, ...grid.map((r) => r[i].length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  // Markdown needs the blank line: a table right under a line of text is read as more text.
  console.log(`\n${line(grid[0])}`);
  console.log(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  for (const r of grid.slice(1)) console.log(line(r));
}

/** `a / b` as a ratio, `1.23×`; n/a when either side is missing. */
export function ratio(a: number | undefined, b: number | undefined, digits = 2): string {
  if (a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b === 0) return 'n/a';
  return `${(a / b).toFixed(digits)}×`;
}

/** A number rounded for a table: `digits` decimals, or n/a when it is missing. */
export function num(x: number | undefined, digits = 1): string {
  return x === undefined || !Number.isFinite(x) ? 'n/a' : x.toFixed(digits);
}
