/**
 * Everything the harness opens is registered here with its (idempotent) closer. What a
 * test opens is closed after that test, before the leak check; what beforeAll opens lives
 * until the file's afterAll.
 */
const testScoped: (() => Promise<unknown>)[] = [];
const fileScoped: (() => Promise<unknown>)[] = [];
let inTest = false;

export function markInTest(v: boolean): void {
  inTest = v;
}

export function track<T>(value: T, close: () => Promise<unknown>): T {
  (inTest ? testScoped : fileScoped).push(close);
  return value;
}

async function closeAll(list: (() => Promise<unknown>)[]): Promise<void> {
  const closers = list.splice(0).reverse();
  for (const close of closers) await close().catch(() => {});
}

export const closeTestScoped = () => closeAll(testScoped);
export const closeFileScoped = () => closeAll(fileScoped);
