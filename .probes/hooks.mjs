import { appendFileSync } from 'node:fs';
export async function resolve(specifier, context, next) { const r = await next(specifier, context); appendFileSync('/tmp/modlist.txt', r.url + '\n'); return r; }
