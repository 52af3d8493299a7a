/** Config overrides for the smallest model the tests train: hidden 32, one layer, vocabulary 300. */
export const TINY_MODEL = ['model.hidden_size=32', 'model.intermediate_size=64', 'model.num_hidden_layers=1', 'model.vocab_size=300'];

/**
 * A tiny run the trainer finishes in seconds: two families, two training variations, 5-step episodes,
 * 2 groups of 2 rollouts per iteration, seed 3. Tests add what they are about (algo, memory, schedule).
 */
export const TINY_RUN = [
  'seed=3',
  ...TINY_MODEL,
  'env.tasks=[fetch, clue]',
  'env.train_variations=2',
  'env.eval_variations=1',
  'env.max_steps=5',
  'rollout.tasks_per_batch=2',
  'rollout.group_size=2',
];
