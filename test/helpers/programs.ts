import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';

/**
 * Programs some checks of `npm test` need beside Node and redis-server. On a developer's
 * machine a missing one skips the checks that need it, by name, and the end of the run says
 * what was skipped and the command that installs it (global-setup.ts's teardown); with
 * CI=true a missing one fails, so CI keeps every check (.ci/run installs them).
 */
export const PROGRAMS = {
  luacheck: {
    what: 'luacheck (npm run check:lua: the transitions library against Redis\'s globals)',
    install: 'apt-get install -y lua-check',
    present: () => onPath('luacheck'),
  },
  chromium: {
    what: 'Chromium (the browser tests of the run inspector, the stream tokens and a useChat chat page)',
    install: 'apt-get install -y chromium',
    present: () => existsSync(chromiumPath()),
  },
  prometheus: {
    what: 'Prometheus and promtool (the /metrics format and the Grafana dashboard\'s queries)',
    install: 'apt-get install -y prometheus',
    present: () => onPath('prometheus') && onPath('promtool'),
  },
} as const;
export type Program = keyof typeof PROGRAMS;

/** Where the browser tests find Chromium: CHROMIUM_PATH, else Debian's. */
export const chromiumPath = () => process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

const onPath = (command: string) => !spawnSync(command, ['--version'], { stdio: 'ignore' }).error;

/** CI=true (as .ci/run runs): a missing program is a failure, not a skip. */
export const strictPrograms = () => process.env.CI === 'true';

/**
 * Whether the checks that need `program` must be skipped here: false when it is installed;
 * true when it is not and the run is not CI's; throws, naming the install command, in CI.
 */
export function skipWithout(program: Program): boolean {
  const p = PROGRAMS[program];
  if (p.present()) return false;
  if (strictPrograms()) throw new Error(`${p.what} is needed with CI=true and is not installed: ${p.install}`);
  return true;
}

/** The programs this machine lacks, each with what it skips and how to install it. */
export function missingPrograms(): { program: Program; what: string; install: string }[] {
  return (Object.keys(PROGRAMS) as Program[])
    .filter((program) => !PROGRAMS[program].present())
    .map((program) => ({ program, what: PROGRAMS[program].what, install: PROGRAMS[program].install }));
}
