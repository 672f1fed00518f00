/** Label value standing for every runtime or agent past the label limit. */
export const OTHER = '_other';

/** The MCP methods /mcp answers or takes, each its own label value of baton_mcp_requests_total. */
export const MCP_METHODS = [
  'initialize', 'notifications/initialized', 'ping', 'tools/list', 'tools/call',
  'tasks/get', 'tasks/result', 'tasks/list', 'tasks/cancel', 'notifications/cancelled',
] as const;

/** Keeps the first `limit` distinct values of a label; later ones read as "_other". */
export class BoundedValues {
  private readonly seen = new Set<string>();
  constructor(private readonly limit: number) {}

  get(value: string): string {
    if (this.seen.has(value)) return value;
    if (this.seen.size >= this.limit) return OTHER;
    this.seen.add(value);
    return value;
  }
}
