/**
 * A critic file made ready to act: the critic, the encoder it was trained with, and the engine that
 * rescores the LLM's candidates with them.
 */
import type { PolicyEngine } from '../policy/types.ts';
import { RetrospexEngine, type ActingSettings } from './actor.ts';
import { Critic } from './critic.ts';
import { createEncoder, TextVectors } from './encoder.ts';

/** What `empo2 eval --json` records of the critic and the acting settings, so a table says what produced it. */
export interface CriticRecord {
  file: string;
  encoder: string;
  hidden: number;
  iql: Critic['iql'];
  training: Record<string, unknown>;
  data: Record<string, unknown>;
  acting: ActingSettings;
}

/** Wraps `inner` with the critic in `criticFile`; the engine returned owns both (its dispose releases them). */
export async function retrospexEngine(
  inner: PolicyEngine,
  criticFile: string,
  acting: ActingSettings,
): Promise<{ engine: RetrospexEngine; record: CriticRecord }> {
  const critic = Critic.load(criticFile);
  try {
    const embedder = await createEncoder(critic.encoder.kind, { dim: critic.encoder.dim });
    const engine = new RetrospexEngine(inner, critic, new TextVectors(embedder), acting);
    const { losses: _, ...training } = critic.meta.training;
    const { files: __, ...data } = critic.meta.data;
    return {
      engine,
      record: { file: criticFile, encoder: critic.encoder.name, hidden: critic.hidden, iql: critic.iql, training, data, acting },
    };
  } catch (e) {
    critic.dispose();
    throw e;
  }
}
