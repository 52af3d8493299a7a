/**
 * Test gating for the live-simulator tests: without the Python set-up they fail in CI (the
 * set-up is part of CI) and are skipped, with the reason printed, on a developer machine.
 */
import { it } from 'vitest';
import { checkScienceWorldSetup } from './setup.ts';

export interface LiveGate {
  available: boolean;
  /** Title suffix that shows, in the test report, why the suite was skipped. */
  label: string;
}

export function scienceWorldGate(): LiveGate {
  const status = checkScienceWorldSetup();
  if (status.ok) return { available: true, label: `scienceworld ${status.scienceworldVersion}` };
  if (process.env.CI) {
    it('ScienceWorld simulator is installed (required in CI)', () => {
      throw new Error(`ScienceWorld tests cannot run: ${status.reason}`);
    });
  } else {
    console.warn(`[scienceworld] skipping live simulator tests: ${status.reason}`);
  }
  return { available: false, label: `SKIPPED: ${status.reason}` };
}
