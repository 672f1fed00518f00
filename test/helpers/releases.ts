/**
 * Baton's releases, read from git: the upgrade test finds the release this working tree
 * upgrades from and builds it in a temporary folder, to run its processes beside ours.
 *
 * A release is the commit that sets package.json's `version` and adds that version's
 * `## <version>` entry to CHANGELOG.md (CHANGELOG.md's header says so). Read from the history
 * this way, it needs no tags, only the commits: a shallow clone cannot answer.
 */
import { execFile } from 'node:child_process';
import { existsSync, lstatSync, mkdtempSync, readFileSync, rmSync, symlinkSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { launcherIn, ROOT } from './harness.ts';

const run = promisify(execFile);

export interface Release {
  /** The release commit. */
  sha: string;
  version: string;
}

/** What the working tree is: its package.json version and the commit it sits on. */
export interface WorkingTree {
  version: string;
  head: string;
}

/**
 * THE RULE: the release a working tree upgrades from.
 *
 * It is the newest release, unless the working tree is that release itself (HEAD is its
 * commit and package.json says its version): then it is the newest release of another
 * version. So between releases, while package.json still says the last release's version,
 * the working tree (the next release in the making) upgrades from that last release; on a
 * release's own commit, it upgrades from the release before. `history` is newest first.
 */
export function previousOf(history: readonly Release[], tree: WorkingTree): Release | undefined {
  const [newest] = history;
  if (!newest) return undefined;
  const isNewest = newest.sha === tree.head && newest.version === tree.version;
  return isNewest ? history.find((r) => r.version !== tree.version) : newest;
}

/** The release this working tree upgrades from; throws, saying what is missing, when git cannot tell. */
export async function previousRelease(root = ROOT): Promise<Release> {
  const tree = await workingTree(root);
  const history = await releaseHistory(root);
  const previous = previousOf(history, tree);
  if (!previous) {
    const found = history.map((r) => `${r.version} (${r.sha.slice(0, 7)})`).join(', ') || 'none';
    throw new Error(
      `The upgrade test needs a release before this working tree (package.json ${tree.version}, HEAD ${tree.head.slice(0, 7)}); ` +
      `releases in the history: ${found}. A release is the commit that sets package.json's version and adds its "## <version>" ` +
      'entry to CHANGELOG.md.',
    );
  }
  return previous;
}

/** Every release reachable from HEAD, newest first. */
export async function releaseHistory(root = ROOT): Promise<Release[]> {
  const shallow = (await git(root, 'rev-parse', '--is-shallow-repository')).trim();
  if (shallow === 'true') {
    throw new Error(
      'The upgrade test reads the releases from the git history, and this clone is shallow: fetch the whole history ' +
      '(git fetch --unshallow; in GitHub Actions, actions/checkout with fetch-depth: 0).',
    );
  }
  const touching = (await git(root, 'log', '--format=%H', '--', 'package.json')).split('\n').filter(Boolean).reverse();
  const releases: Release[] = [];
  let before: string | undefined;
  for (const sha of touching) {
    const version = versionOf(await git(root, 'show', `${sha}:package.json`));
    if (version && version !== before && await hasChangelogEntry(root, sha, version)) releases.push({ sha, version });
    before = version;
  }
  return releases.reverse();
}

async function hasChangelogEntry(root: string, sha: string, version: string): Promise<boolean> {
  const changelog = await git(root, 'show', `${sha}:CHANGELOG.md`).catch(() => '');
  const heading = new RegExp(`^## ${version.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(\\s|$)`, 'm');
  return heading.test(changelog);
}

async function workingTree(root: string): Promise<WorkingTree> {
  const version = versionOf(readFileSync(join(root, 'package.json'), 'utf8'));
  if (!version) throw new Error(`${root}package.json has no version`);
  return { version, head: (await git(root, 'rev-parse', 'HEAD')).trim() };
}

function versionOf(packageJson: string): string | undefined {
  const { version } = JSON.parse(packageJson) as { version?: unknown };
  return typeof version === 'string' ? version : undefined;
}

async function git(root: string, ...args: string[]): Promise<string> {
  try {
    const { stdout } = await run('git', args, { cwd: root, maxBuffer: 64 * 1024 * 1024 });
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    const why = e.stderr?.trim() || e.message;
    throw new Error(`The upgrade test reads releases from git, and \`git ${args.join(' ')}\` failed in ${root}: ${why}`, { cause: err });
  }
}

export interface ReleaseCheckout {
  release: Release;
  /** The release's files (with a trailing slash, like ROOT): pass it as `spawn`'s `checkout`. */
  dir: string;
  /** How its dependencies came: this tree's node_modules linked, or its own `npm ci`. */
  dependencies: 'linked' | 'installed';
  /** Removes the folder (the link only, never what it points to). */
  remove(): Promise<void>;
}

/**
 * The release's files in a temporary folder, ready to run `baton` from its sources. Its
 * dependencies are this tree's node_modules, linked, when both lock files pin the same
 * packages (nothing to download, and it takes a second); otherwise its own `npm ci`.
 */
export async function checkoutRelease(release: Release, root = ROOT): Promise<ReleaseCheckout> {
  const dir = mkdtempSync(join(tmpdir(), `baton-release-${release.version}-`)) + '/';
  const link = join(dir, 'node_modules');
  const remove = async () => {
    // The link first, by itself: removing the folder must never reach into this tree's node_modules.
    if (lstatSync(link, { throwIfNoEntry: false })?.isSymbolicLink()) unlinkSync(link);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const { stdout: tar } = await run('git', ['archive', release.sha], { cwd: root, encoding: 'buffer', maxBuffer: 1024 * 1024 * 1024 });
    await untar(tar, dir);
    if (!existsSync(launcherIn(dir))) {
      throw new Error(`release ${release.version} has no ${launcherIn('')}, which the upgrade test starts its processes with`);
    }
    const ours = readFileSync(join(root, 'package-lock.json'), 'utf8');
    const theirs = readFileSync(join(dir, 'package-lock.json'), 'utf8');
    const linked = samePackages(ours, theirs) && existsSync(join(root, 'node_modules'));
    if (linked) {
      symlinkSync(join(root, 'node_modules'), link, 'dir');
    } else {
      // Its runtime dependencies and tsx (an optional one): what `baton api` and `baton worker`
      // load from sources, as an installed package has them. The dev tools are not run there.
      await run('npm', ['ci', '--omit=dev', '--no-audit', '--no-fund'], { cwd: dir, maxBuffer: 64 * 1024 * 1024 });
    }
    return { release, dir, dependencies: linked ? 'linked' : 'installed', remove };
  } catch (err) {
    await remove();
    throw err;
  }
}

function untar(archive: Buffer, dir: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = execFile('tar', ['-x', '-C', dir], (err) => (err ? reject(err) : resolve()));
    child.stdin!.end(archive);
  });
}

/**
 * Two lock files pin the same packages when they differ in the package's own version at
 * most: a release commit changes that in package-lock.json too, and it changes nothing
 * that node_modules holds.
 */
function samePackages(a: string, b: string): boolean {
  const withoutOwnVersion = (text: string) => {
    const lock = JSON.parse(text) as { version?: string; packages?: Record<string, { version?: string }> };
    delete lock.version;
    if (lock.packages?.['']) delete lock.packages[''].version;
    return JSON.stringify(lock);
  };
  return withoutOwnVersion(a) === withoutOwnVersion(b);
}
