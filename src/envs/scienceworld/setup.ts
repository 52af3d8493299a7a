/**
 * Where the ScienceWorld bridge's Python lives, and whether this machine can run the simulator.
 *
 * The simulator needs three things: the project's virtualenv (scripts/setup-python.sh), the
 * `scienceworld` package inside it (it ships the simulator jar), and a Java runtime on PATH.
 * Each missing piece gets a message that says what to install.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const BRIDGE_SCRIPT = fileURLToPath(new URL('./bridge.py', import.meta.url));
export const SETUP_HINT = 'run scripts/setup-python.sh (needs python3 and java 11+ on PATH)';

/** The interpreter that runs the bridge: $EMPO2_PYTHON if set, else the project's .venv. */
export function defaultPython(): string {
  const fromEnv = process.env.EMPO2_PYTHON;
  if (fromEnv && fromEnv.trim() !== '') return fromEnv;
  return fileURLToPath(new URL('../../../.venv/bin/python', import.meta.url));
}

export interface SetupStatus {
  ok: boolean;
  python: string;
  /** Why the simulator cannot run here, when ok is false. */
  reason?: string;
  scienceworldVersion?: string;
}

let cachedStatus: SetupStatus | undefined;

/**
 * Checks, without starting a JVM, that the bridge can run: the interpreter exists, it can
 * import `scienceworld` and find its jar, and `java` answers. Cached per Node process.
 */
export function checkScienceWorldSetup(python: string = defaultPython()): SetupStatus {
  if (cachedStatus && cachedStatus.python === python) return cachedStatus;
  cachedStatus = probe(python);
  return cachedStatus;
}

function probe(python: string): SetupStatus {
  if (python.includes('/') && !existsSync(python)) {
    return { ok: false, python, reason: `no Python interpreter at ${python}: ${SETUP_HINT}` };
  }
  const imported = spawnSync(
    python,
    [
      '-c',
      'import os, scienceworld, scienceworld.constants as c; print(scienceworld.__version__ if os.path.exists(c.JAR_PATH) else "NOJAR")',
    ],
    { encoding: 'utf8', timeout: 60_000 },
  );
  if (imported.error) {
    return { ok: false, python, reason: `cannot run ${python} (${imported.error.message}): ${SETUP_HINT}` };
  }
  if (imported.status !== 0) {
    const detail = lastLine(imported.stderr);
    return { ok: false, python, reason: `the scienceworld package is not installed for ${python} (${detail}): ${SETUP_HINT}` };
  }
  const version = imported.stdout.trim();
  if (version === 'NOJAR') {
    return { ok: false, python, reason: `the scienceworld package for ${python} has no simulator jar; reinstall it: ${SETUP_HINT}` };
  }
  const java = spawnSync('java', ['-version'], { encoding: 'utf8', timeout: 60_000 });
  if (java.error || java.status !== 0) {
    return {
      ok: false,
      python,
      reason: "'java' is not on PATH: ScienceWorld needs a Java runtime 11+ (e.g. 'apt-get install openjdk-17-jre-headless')",
    };
  }
  return { ok: true, python, scienceworldVersion: version };
}

function lastLine(text: string | null | undefined): string {
  const lines = (text ?? '').trim().split('\n');
  return lines[lines.length - 1] || 'no error output';
}
