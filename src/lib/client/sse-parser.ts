/** One dispatched Server-Sent Event as the WHATWG EventSource rules define it. */
export interface SseMessage {
  /** The `id:` of this event, if it carried one. */
  id?: string;
  /** `event:` (defaults to `message`). */
  event: string;
  data: string;
}

/**
 * Incremental parser of a `text/event-stream` body (WHATWG HTML §9.2.6): lines end in
 * LF, CR or CRLF; `field: value` with one optional space; `data` lines join with LF; a
 * blank line dispatches; `:` lines are comments. A chunk may end anywhere, even between
 * the CR and LF of one line ending.
 */
export class SseParser {
  /** The line being received, in the pieces it arrived in (joined once, at its end). */
  private partial: string[] = [];
  private pendingCr = false;
  private id: string | undefined;
  private event = '';
  private data: string[] = [];
  private hasData = false;
  /** The latest `retry:` hint in ms, if the server sent one. */
  retryMs: number | undefined;

  /**
   * Feeds decoded text; returns the events completed by it. Linear in the text: only the new
   * text is scanned and an unfinished line is kept in pieces, so an event of megabytes that
   * arrives in thousands of chunks costs no more than its bytes.
   */
  push(text: string): SseMessage[] {
    const out: SseMessage[] = [];
    let s = text;
    if (this.pendingCr && s.startsWith('\n')) s = s.slice(1);
    this.pendingCr = false;
    let start = 0;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      let line = s.slice(start, i);
      if (this.partial.length) {
        this.partial.push(line);
        line = this.partial.join('');
        this.partial = [];
      }
      this.line(line, out);
      if (c === 13) {
        if (i + 1 < s.length) {
          if (s.charCodeAt(i + 1) === 10) i++;
        } else {
          this.pendingCr = true;
        }
      }
      start = i + 1;
    }
    if (start < s.length) this.partial.push(s.slice(start));
    return out;
  }

  private line(line: string, out: SseMessage[]): void {
    if (line === '') {
      if (this.hasData) out.push({ id: this.id, event: this.event || 'message', data: this.data.join('\n') });
      this.event = '';
      this.data = [];
      this.hasData = false;
      this.id = undefined;
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'data': this.data.push(value); this.hasData = true; break;
      case 'event': this.event = value; break;
      case 'id': if (!value.includes('\0')) this.id = value; break;
      case 'retry': if (/^\d+$/.test(value)) this.retryMs = Number(value); break;
      default: break;
    }
  }
}
