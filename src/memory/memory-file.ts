/** Where a run's tip memory is: a memory.json given directly, in a checkpoint, or in a run's latest checkpoint. */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

export function findMemoryFile(path: string): string {
  if (!existsSync(path)) throw new Error(`${path} does not exist`);
  if (statSync(path).isFile()) return path;
  const direct = join(path, 'memory.json');
  if (existsSync(direct)) return direct;
  const pointer = join(path, 'checkpoints', 'latest.json');
  if (existsSync(pointer)) {
    const name = (JSON.parse(readFileSync(pointer, 'utf8')) as { checkpoint: string }).checkpoint;
    const inLatest = join(path, 'checkpoints', name, 'memory.json');
    if (existsSync(inLatest)) return inLatest;
    throw new Error(`${path}: the latest checkpoint (${name}) has no memory.json (was the run trained with algo.name=empo2?)`);
  }
  throw new Error(`${path}: no memory.json here and not a run directory`);
}
