/** Config overrides for the smallest model the tests train: hidden 32, one layer, vocabulary 300. */
export const TINY_MODEL = ['model.hidden_size=32', 'model.intermediate_size=64', 'model.num_hidden_layers=1', 'model.vocab_size=300'];
