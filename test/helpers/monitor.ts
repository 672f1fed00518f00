import { connect } from 'node:net';

/** What Redis ran while a test watched (MONITOR): each command as its name and arguments. */
export interface CommandWatch {
  seen: string[][];
  stop(): void;
}

/**
 * Watches the commands the Redis at `url` runs, on a socket of its own read line by line.
 * Not ioredis's monitor(): on a busy server a monitor line can arrive in the same read as
 * MONITOR's OK, and ioredis then takes it for a reply to a command it never sent ("Command
 * queue state error"), failing the test that watched.
 */
export async function watchCommands(url: string): Promise<CommandWatch> {
  const u = new URL(url);
  const socket = connect(Number(u.port || 6379), u.hostname || '127.0.0.1');
  socket.setEncoding('utf8');
  const seen: string[][] = [];
  let buffer = '';
  // AUTH's OK first when the URL has a password, then MONITOR's; every line after is a command.
  let oksToCome = u.password ? 2 : 1;
  const ready = new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.on('data', (chunk: string) => {
      buffer += chunk;
      let end: number;
      while ((end = buffer.indexOf('\r\n')) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (oksToCome === 0) seen.push(argsOf(line));
        else if (line === '+OK' && --oksToCome === 0) resolve();
        else if (line.startsWith('-')) reject(new Error(`MONITOR refused: ${line.slice(1)}`));
      }
    });
  });
  const user = decodeURIComponent(u.username);
  if (u.password) socket.write(command(user ? ['AUTH', user, decodeURIComponent(u.password)] : ['AUTH', decodeURIComponent(u.password)]));
  socket.write(command(['MONITOR']));
  await ready;
  return { seen, stop: () => socket.destroy() };
}

function command(args: string[]): string {
  return `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
}

/** `+1712345678.123456 [0 127.0.0.1:5000] "hmget" "key" "field"` → ['hmget', 'key', 'field']. */
function argsOf(line: string): string[] {
  return [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1].replace(/\\(["\\])/g, '$1'));
}
